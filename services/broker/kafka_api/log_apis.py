"""Produce, Fetch, ListOffsets and OffsetForLeaderEpoch on the Kafka listener: each request becomes
the gRPC request message and goes through `BrokerService`, records transcoded on the way
(tidelog.common.kafka_wire.record_batches).

Fetch sessions (KIP-227) map onto the broker's own: SessionEpoch -1 fetches without a session,
0 opens one (closing the one named), and N > 0 continues session SessionId.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any, Final

from tidelog.broker.broker_service import BrokerService
from tidelog.broker.kafka_api.api_table import ApiKey
from tidelog.broker.kafka_api.delete_records import delete_records
from tidelog.broker.kafka_api.produce_sequences import ProduceSequences
from tidelog.broker.kafka_api.request_context import KafkaRequestContext
from tidelog.common.errors import ErrorCode, TidelogError
from tidelog.common.kafka_wire.record_batches import from_kafka_batches, to_kafka_batches
from tidelog.common.record.batch_layout import read_header
from tidelog.v1 import broker_pb2

__all__ = ["HANDLED", "LogApis"]

Message = dict[str, Any]
SESSIONLESS: Final = -1  # Kafka's FINAL_EPOCH: a full fetch, no session
OPEN_SESSION: Final = 0  # Kafka's INITIAL_EPOCH
CONSUMER: Final = -1


def _by_topic(entries: Iterable[tuple[str, Message]], topic_field: str, partitions_field: str) -> list[Message]:
    """Per-partition answers grouped under their topics, in first-seen order (Kafka's layout)."""
    grouped: dict[str, list[Message]] = {}
    for topic, entry in entries:
        grouped.setdefault(topic, []).append(entry)
    return [{topic_field: topic, partitions_field: answers} for topic, answers in grouped.items()]


class LogApis:
    def __init__(self, service: BrokerService) -> None:
        self.service = service

    async def produce(self, request: Message, version: int, context: KafkaRequestContext) -> Message | None:
        sequences = context.produce_sequences
        previous, settled = sequences.turn() if sequences is not None else (None, None)
        try:
            return await self._produce(request, context, sequences, previous)
        finally:
            if settled is not None:
                settled.set()

    async def _produce(
        self,
        request: Message,
        context: KafkaRequestContext,
        sequences: ProduceSequences | None,
        previous: asyncio.Event | None,
    ) -> Message | None:
        acks = request["Acks"]
        refused: list[tuple[str, Message]] = []
        partitions = []
        producers: dict[tuple[str, int], tuple[int, int] | None] = {}
        for topic in request["TopicData"]:
            for data in topic["PartitionData"]:
                try:
                    if data["Records"] is None:
                        raise TidelogError("a produce request without records")
                    stored = from_kafka_batches(data["Records"])
                except TidelogError as error:
                    code = error.code if error.code != ErrorCode.UNKNOWN_SERVER_ERROR else ErrorCode.CORRUPT_MESSAGE
                    refused.append((topic["Name"], _produce_error(data["Index"], code, str(error))))
                    continue
                partitions.append(
                    broker_pb2.ProducePartition(topic=topic["Name"], partition=data["Index"], record_batches=stored)
                )
                header = read_header(stored) if stored else None
                producers[(topic["Name"], data["Index"])] = (
                    (header.producer_id, header.producer_epoch) if header and header.producer_id >= 0 else None
                )
        answer = await self.service.Produce(
            broker_pb2.ProduceRequest(
                acks=acks,
                timeout_ms=request["TimeoutMs"],
                partitions=partitions,
                transactional_id=request["TransactionalId"] or "",
            ),
            context,
            on_appended=context.release.set,  # the connection's next request may start
        )
        if acks == 0:
            return None  # Kafka sends nothing back to acks=0
        results = [
            (
                result.topic,
                {
                    "Index": result.partition,
                    "ErrorCode": result.error_code,
                    "BaseOffset": result.base_offset if not result.error_code else -1,
                    "LogAppendTimeMs": result.log_append_time_ms or -1,
                    "LogStartOffset": result.log_start_offset if not result.error_code else -1,
                    "RecordErrors": [],
                    "ErrorMessage": result.error_message or None,
                },
            )
            for result in answer.partitions
        ]
        if sequences is not None:
            if previous is not None:
                await previous.wait()
            for topic_name, result in results:
                sequences.settle(topic_name, result["Index"], producers.get((topic_name, result["Index"])), result)
        return {
            "Responses": _by_topic([*results, *refused], "Name", "PartitionResponses"),
            "ThrottleTimeMs": answer.throttle_time_ms,
        }

    async def fetch(self, request: Message, version: int, context: KafkaRequestContext) -> Message:
        context.release.set()  # a fetch changes nothing another request of the connection reads
        session_id, epoch = (request["SessionId"], request["SessionEpoch"]) if version >= 7 else (0, SESSIONLESS)
        if epoch in (SESSIONLESS, OPEN_SESSION) and session_id:
            self._close_session(session_id, context)
        fetches = [
            broker_pb2.FetchPartition(
                topic=topic["Topic"],
                partition=partition["Partition"],
                fetch_offset=partition["FetchOffset"],
                partition_max_bytes=partition["PartitionMaxBytes"],
                current_leader_epoch=partition["CurrentLeaderEpoch"],
            )
            for topic in request["Topics"]
            for partition in topic["Partitions"]
        ]
        forgotten = [
            broker_pb2.FetchPartition(topic=topic["Topic"], partition=partition)
            for topic in request["ForgottenTopicsData"]
            for partition in topic["Partitions"]
        ]
        incremental = epoch != SESSIONLESS
        answer = await self.service.Fetch(
            broker_pb2.FetchRequest(
                replica_id=CONSUMER,
                max_wait_ms=request["MaxWaitMs"],
                min_bytes=request["MinBytes"],
                max_bytes=request["MaxBytes"],
                partitions=fetches,
                incremental=incremental,
                session_id=session_id if epoch > OPEN_SESSION else 0,
                session_epoch=max(epoch, 0),
                forgotten=forgotten,
                isolation_level=request["IsolationLevel"],
            ),
            context,
        )
        results = [
            (
                read.topic,
                {
                    "PartitionIndex": read.partition,
                    "ErrorCode": read.error_code,
                    "HighWatermark": read.high_watermark,
                    "LastStableOffset": read.last_stable_offset,
                    "LogStartOffset": read.log_start_offset,
                    "AbortedTransactions": (
                        [
                            {"ProducerId": aborted.producer_id, "FirstOffset": aborted.first_offset}
                            for aborted in read.aborted_transactions
                        ]
                        if request["IsolationLevel"]
                        else None
                    ),
                    "PreferredReadReplica": -1,
                    "Records": to_kafka_batches(read.record_batches) if read.record_batches else b"",
                },
            )
            for read in answer.partitions
        ]
        return {
            "ThrottleTimeMs": answer.throttle_time_ms,
            "ErrorCode": answer.error_code,
            "SessionId": answer.session_id,
            "Responses": _by_topic(results, "Topic", "Partitions"),
        }

    def _close_session(self, session_id: int, context: KafkaRequestContext) -> None:
        """Kafka's SessionEpoch -1 or 0 with a SessionId: that session is over (its owner's only)."""
        sessions = self.service.replicas.fetch_sessions
        session = sessions.sessions.get(session_id)
        if (
            session is not None
            and session.replica_id == CONSUMER
            and session.owner == self.service.session_owner(context)
        ):
            sessions.close(session)

    async def delete_records(self, request: Message, version: int, context: KafkaRequestContext) -> Message:
        return await delete_records(self.service, request, context)

    async def list_offsets(self, request: Message, version: int, context: KafkaRequestContext) -> Message:
        answer = await self.service.ListOffsets(
            broker_pb2.ListOffsetsRequest(
                partitions=[
                    broker_pb2.ListOffsetsPartition(
                        topic=topic["Name"], partition=partition["PartitionIndex"], timestamp=partition["Timestamp"]
                    )
                    for topic in request["Topics"]
                    for partition in topic["Partitions"]
                ],
                isolation_level=request["IsolationLevel"],
            ),
            context,
        )
        results = [
            (
                result.topic,
                {
                    "PartitionIndex": result.partition,
                    "ErrorCode": result.error_code,
                    "Timestamp": result.timestamp,
                    "Offset": result.offset,
                    "LeaderEpoch": -1,
                },
            )
            for result in answer.partitions
        ]
        return {"ThrottleTimeMs": 0, "Topics": _by_topic(results, "Name", "Partitions")}

    async def offset_for_leader_epoch(self, request: Message, version: int, context: KafkaRequestContext) -> Message:
        answer = await self.service.OffsetsForLeaderEpoch(
            broker_pb2.OffsetsForLeaderEpochRequest(
                replica_id=CONSUMER,
                partitions=[
                    broker_pb2.EpochQuery(
                        topic=topic["Topic"],
                        partition=partition["Partition"],
                        current_leader_epoch=partition["CurrentLeaderEpoch"],
                        leader_epoch=partition["LeaderEpoch"],
                    )
                    for topic in request["Topics"]
                    for partition in topic["Partitions"]
                ],
            ),
            context,
        )
        results = [
            (
                result.topic,
                {
                    "ErrorCode": result.error_code,
                    "Partition": result.partition,
                    "LeaderEpoch": result.leader_epoch,
                    "EndOffset": result.end_offset,
                },
            )
            for result in answer.partitions
        ]
        return {"ThrottleTimeMs": 0, "Topics": _by_topic(results, "Topic", "Partitions")}


def _produce_error(partition: int, code: ErrorCode, message: str) -> Message:
    return {
        "Index": partition,
        "ErrorCode": int(code),
        "BaseOffset": -1,
        "LogAppendTimeMs": -1,
        "LogStartOffset": -1,
        "RecordErrors": [],
        "ErrorMessage": message,
    }


HANDLED: Final = {
    ApiKey.PRODUCE: "produce",
    ApiKey.FETCH: "fetch",
    ApiKey.LIST_OFFSETS: "list_offsets",
    ApiKey.OFFSET_FOR_LEADER_EPOCH: "offset_for_leader_epoch",
    ApiKey.DELETE_RECORDS: "delete_records",
}
