"""DeleteRecords on the Kafka listener (Kafka's ReplicaManager.deleteRecords and
DelayedDeleteRecords): each partition's leader moves its log start up to the offset asked (-1: the
high watermark), then the request waits, up to its TimeoutMs, until every live replica has moved
too — the low watermark, the smallest log start among them, at or past the offset. Followers move
at their next fetch (replica_fetcher, within their high watermark) and say so in the fetch after.
A partition still waiting at the deadline is answered REQUEST_TIMED_OUT, one whose leadership moved
NOT_LEADER_OR_FOLLOWER, as Kafka's are.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Final

from tidelog.broker.broker_service import BrokerService
from tidelog.broker.kafka_api.request_context import KafkaRequestContext
from tidelog.broker.partition import Partition
from tidelog.broker.replica_role import ReplicaRole
from tidelog.common.errors import ErrorCode, OffsetOutOfRangeError, TidelogError
from tidelog.common.security.authorization.acl import Operation, ResourceType

__all__ = ["HIGH_WATERMARK", "delete_records"]

Message = dict[str, Any]
HIGH_WATERMARK: Final = -1  # DeleteRecords' offset for "up to the high watermark"


class _Waiting:
    """One partition's deletion until its low watermark reaches the offset (Kafka's
    DeleteRecordsPartitionStatus): REQUEST_TIMED_OUT until then."""

    def __init__(self, hosted: Partition, offset: int, answer: Message) -> None:
        self.hosted, self.offset, self.answer = hosted, offset, answer
        self.epoch = hosted.state.leader_epoch
        answer["ErrorCode"] = int(ErrorCode.REQUEST_TIMED_OUT)

    def done(self, broker_id: int, live: set[int]) -> bool:
        hosted = self.hosted
        if hosted.role is not ReplicaRole.LEADER or hosted.state.leader_epoch != self.epoch:
            self.answer["ErrorCode"] = int(ErrorCode.NOT_LEADER_OR_FOLLOWER)
            return True
        low = hosted.low_watermark(broker_id, live)
        if low < self.offset:
            return False
        self.answer.update(LowWatermark=low, ErrorCode=int(ErrorCode.NONE))
        return True


async def delete_records(service: BrokerService, request: Message, context: KafkaRequestContext) -> Message:
    caller = service.access.caller(context)
    topics, waiting = [], []
    for topic in request["Topics"]:
        name = topic["Name"]
        allowed = service.access.allowed(caller, Operation.DELETE, ResourceType.TOPIC, name)
        results = []
        for entry in topic["Partitions"]:
            answer: Message = {"PartitionIndex": entry["PartitionIndex"], "LowWatermark": -1, "ErrorCode": 0}
            results.append(answer)
            if not allowed:
                answer["ErrorCode"] = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                continue
            try:
                hosted = service.replicas.leader_partition(name, entry["PartitionIndex"])
                offset = entry["Offset"] if entry["Offset"] != HIGH_WATERMARK else hosted.log.high_watermark
                if offset < 0:
                    raise OffsetOutOfRangeError(f"offset {offset}")
                answer["LowWatermark"] = await service.replicas.io.run(
                    hosted.log.delete_records, offset, request="DeleteRecords"
                )
                hosted.notify_appended()  # (fetch sessions: the log start moved, news for followers)
                waiting.append(_Waiting(hosted, offset, answer))
            except TidelogError as error:
                answer["ErrorCode"] = int(error.code)
        topics.append({"Name": name, "Partitions": results})
    await _until_replicas_moved(service, waiting, request["TimeoutMs"] / 1000)
    return {"ThrottleTimeMs": 0, "Topics": topics}


async def _until_replicas_moved(service: BrokerService, waiting: list[_Waiting], timeout_s: float) -> None:
    """Wait until each partition's low watermark reaches its offset, or the deadline."""
    deadline = time.monotonic() + max(timeout_s, 0.0)
    broker_id = service.replicas.broker_id
    while True:
        live = set(service.metadata.incarnations)
        waiting = [entry for entry in waiting if not entry.done(broker_id, live)]
        left = deadline - time.monotonic()
        if not waiting or left <= 0:
            return
        # a follower's fetch reporting its log start, or the leadership moving (which also wakes
        # acks=all waiters), or a broker's death changing who counts: at the latest, a second on
        events = {
            event for entry in waiting for event in (entry.hosted.log_start_waiter(), entry.hosted.high_watermark_moved)
        }
        waits = [asyncio.ensure_future(event.wait()) for event in events]
        try:
            await asyncio.wait(waits, timeout=min(left, 1.0), return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()
