"""InitProducerId and the transaction requests on the Kafka listener, forwarded over gRPC: to the
transactional id's transaction coordinator (InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn,
EndTxn) and to the group's coordinator (TxnOffsetCommit); FindCoordinator for a transactional id
names the broker asked (group_apis), which forwards them.

The versions served predate KIP-890's second part: such a client keeps its producer epoch across
transactions, so EndTxn asks the coordinator not to bump it (`keep_epoch`, ADR 0026), as Kafka's
coordinator answers those versions.
"""

from __future__ import annotations

from typing import Any, Final

from tidelog.broker.broker_service import BrokerService
from tidelog.broker.kafka_api.api_table import ApiKey
from tidelog.broker.kafka_api.coordinator_forwarding import (
    CoordinatorUnavailableError,
    committed_partitions,
    forward,
    offsets_to_commit,
)
from tidelog.broker.kafka_api.request_context import KafkaRequestContext
from tidelog.common.channels import ChannelPool
from tidelog.v1 import broker_pb2, coordinator_pb2, transaction_pb2

__all__ = ["HANDLED", "TxnApis"]

Message = dict[str, Any]
REQUEST_TIMEOUT_S: Final = 30.0


class TxnApis:
    def __init__(self, service: BrokerService, channels: ChannelPool) -> None:
        self.service = service
        self.channels = channels

    async def _call(
        self, lookup: coordinator_pb2.FindCoordinatorRequest, context: KafkaRequestContext, method: str, request: Any
    ) -> Any:
        return await forward(self.service, self.channels, lookup, context, method, request, REQUEST_TIMEOUT_S)

    async def _txn(self, transactional_id: str, context: KafkaRequestContext, method: str, request: Any) -> int:
        """The transaction coordinator's error code for `request` (0: done)."""
        lookup = coordinator_pb2.FindCoordinatorRequest(transactional_id=transactional_id)
        try:
            answer = await self._call(lookup, context, method, request)
        except CoordinatorUnavailableError as error:
            return error.code
        return int(answer.error_code)

    async def init_producer_id(self, request: Message, version: int, context: KafkaRequestContext) -> Message:
        transactional_id = request["TransactionalId"]
        if not transactional_id:  # an idempotent producer: this broker hands out the id
            answer: Any = await self.service.InitProducerId(broker_pb2.InitProducerIdRequest(), context)
        else:
            lookup = coordinator_pb2.FindCoordinatorRequest(transactional_id=transactional_id)
            wanted = transaction_pb2.TxnInitProducerIdRequest(
                transactional_id=transactional_id, transaction_timeout_ms=request["TransactionTimeoutMs"]
            )
            try:
                answer = await self._call(lookup, context, "InitProducerId", wanted)
            except CoordinatorUnavailableError as error:
                return {"ThrottleTimeMs": 0, "ErrorCode": error.code, "ProducerId": -1, "ProducerEpoch": -1}
        return {
            "ThrottleTimeMs": 0,
            "ErrorCode": answer.error_code,
            "ProducerId": answer.producer_id,
            "ProducerEpoch": answer.producer_epoch,
        }

    async def add_partitions_to_txn(self, request: Message, version: int, context: KafkaRequestContext) -> Message:
        transactional_id = request["V3AndBelowTransactionalId"]
        topics = request["V3AndBelowTopics"]
        code = await self._txn(
            transactional_id,
            context,
            "AddPartitionsToTxn",
            transaction_pb2.AddPartitionsToTxnRequest(
                transactional_id=transactional_id,
                producer_id=request["V3AndBelowProducerId"],
                producer_epoch=request["V3AndBelowProducerEpoch"],
                partitions=[
                    transaction_pb2.TxnTopicPartition(topic=topic["Name"], partition=partition)
                    for topic in topics
                    for partition in topic["Partitions"]
                ],
            ),
        )
        return {
            "ThrottleTimeMs": 0,
            "ResultsByTopicV3AndBelow": [
                {
                    "Name": topic["Name"],
                    "ResultsByPartition": [
                        {"PartitionIndex": partition, "PartitionErrorCode": code} for partition in topic["Partitions"]
                    ],
                }
                for topic in topics
            ],
        }

    async def add_offsets_to_txn(self, request: Message, version: int, context: KafkaRequestContext) -> Message:
        code = await self._txn(
            request["TransactionalId"],
            context,
            "AddOffsetsToTxn",
            transaction_pb2.AddOffsetsToTxnRequest(
                transactional_id=request["TransactionalId"],
                producer_id=request["ProducerId"],
                producer_epoch=request["ProducerEpoch"],
                group_id=request["GroupId"],
            ),
        )
        return {"ThrottleTimeMs": 0, "ErrorCode": code}

    async def end_txn(self, request: Message, version: int, context: KafkaRequestContext) -> Message:
        code = await self._txn(
            request["TransactionalId"],
            context,
            "EndTxn",
            transaction_pb2.EndTxnRequest(
                transactional_id=request["TransactionalId"],
                producer_id=request["ProducerId"],
                producer_epoch=request["ProducerEpoch"],
                committed=request["Committed"],
                keep_epoch=True,  # (the versions served predate KIP-890's epoch bump)
            ),
        )
        return {"ThrottleTimeMs": 0, "ErrorCode": code}

    async def txn_offset_commit(self, request: Message, version: int, context: KafkaRequestContext) -> Message:
        topics = request["Topics"]
        lookup = coordinator_pb2.FindCoordinatorRequest(group_id=request["GroupId"])
        wanted = coordinator_pb2.TxnOffsetCommitRequest(
            transactional_id=request["TransactionalId"],
            group_id=request["GroupId"],
            producer_id=request["ProducerId"],
            producer_epoch=request["ProducerEpoch"],
            generation_id=request["GenerationId"] if version >= 3 else -1,
            member_id=request["MemberId"] if version >= 3 else "",
            group_instance_id=(request["GroupInstanceId"] or "") if version >= 3 else "",
            partitions=offsets_to_commit(topics),
        )
        try:
            answer = await self._call(lookup, context, "TxnOffsetCommit", wanted)
            codes = {(r.topic, r.partition): r.error_code or answer.error_code for r in answer.partitions}
            default = answer.error_code
        except CoordinatorUnavailableError as error:
            codes, default = {}, error.code
        return {"ThrottleTimeMs": 0, "Topics": committed_partitions(topics, codes, default)}


HANDLED: Final = {
    ApiKey.INIT_PRODUCER_ID: "init_producer_id",
    ApiKey.ADD_PARTITIONS_TO_TXN: "add_partitions_to_txn",
    ApiKey.ADD_OFFSETS_TO_TXN: "add_offsets_to_txn",
    ApiKey.END_TXN: "end_txn",
    ApiKey.TXN_OFFSET_COMMIT: "txn_offset_commit",
}
