"""A member's requests to its group coordinator (the wire half of Kafka's ConsumerCoordinator):
JoinGroup with the member's subscription for each assignor, SyncGroup, Heartbeat, LeaveGroup,
OffsetCommit, OffsetFetch, and, when this member leads, the assignment the chosen assignor makes
(assignors.py).

Nothing here holds membership state: the group consumer keeps it (membership.py) and decides
what to send; this builds the requests from its settings and reads the answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping, Sequence

from tidelog.client.assignors import (
    ASSIGNORS,
    Subscription,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from tidelog.client.client_logging import get_logger
from tidelog.client.cluster_metadata import ClusterMetadata, TopicPartition
from tidelog.client.coordinator_link import CoordinatorLink
from tidelog.common.errors import ErrorCode, TidelogError
from tidelog.common.settings import ConsumerSettings
from tidelog.v1 import coordinator_pb2

__all__ = ["GroupProtocol"]

log = get_logger(__name__)

PROTOCOL_TYPE = "consumer"
ANSWER_GRACE_S = 5.0  # a join or sync may wait a whole rebalance (max.poll.interval.ms): and then this


class GroupProtocol:
    def __init__(
        self, group_id: str, link: CoordinatorLink, metadata: ClusterMetadata, settings: ConsumerSettings
    ) -> None:
        self.group_id = group_id
        self.link = link
        self.metadata = metadata
        self.settings = settings
        # A join or sync is answered once the rebalance completes, which waits for every member's
        # poll (the rebalance timeout is max.poll.interval.ms, as Kafka's consumer sends it).
        self._rebalance_wait_s = settings.max_poll_interval_ms / 1000 + ANSWER_GRACE_S

    async def join(self, member_id: str, subscription: Subscription) -> coordinator_pb2.JoinGroupResponse:
        metadata = encode_subscription(subscription)
        request = coordinator_pb2.JoinGroupRequest(
            group_id=self.group_id,
            session_timeout_ms=self.settings.session_timeout_ms,
            rebalance_timeout_ms=self.settings.max_poll_interval_ms,
            member_id=member_id,
            group_instance_id=self.settings.group_instance_id,
            protocol_type=PROTOCOL_TYPE,
            protocols=[
                coordinator_pb2.Protocol(name=name, metadata=metadata)
                for name in self.settings.partition_assignment_strategy
            ],
            client_id=self.settings.client_id,
        )
        joined = await self.link.call("JoinGroup", request, timeout_s=self._rebalance_wait_s)
        assert isinstance(joined, coordinator_pb2.JoinGroupResponse)
        return joined

    async def sync(
        self, generation_id: int, member_id: str, assignments: list[coordinator_pb2.Assignment]
    ) -> coordinator_pb2.SyncGroupResponse:
        request = coordinator_pb2.SyncGroupRequest(
            group_id=self.group_id,
            generation_id=generation_id,
            member_id=member_id,
            group_instance_id=self.settings.group_instance_id,
            assignments=assignments,
        )
        synced = await self.link.call("SyncGroup", request, timeout_s=self._rebalance_wait_s)
        assert isinstance(synced, coordinator_pb2.SyncGroupResponse)
        return synced

    async def heartbeat(self, generation_id: int, member_id: str) -> coordinator_pb2.HeartbeatResponse:
        request = coordinator_pb2.HeartbeatRequest(
            group_id=self.group_id,
            generation_id=generation_id,
            member_id=member_id,
            group_instance_id=self.settings.group_instance_id,
        )
        response = await self.link.call("Heartbeat", request)
        assert isinstance(response, coordinator_pb2.HeartbeatResponse)
        return response

    async def leave(self, member_id: str) -> None:
        """LeaveGroup, best effort (the session expires anyway); a static member never leaves:
        it keeps its place for its session (KIP-345)."""
        if not member_id or self.settings.group_instance_id:
            return
        with contextlib.suppress(TidelogError):
            await self.link.call(
                "LeaveGroup", coordinator_pb2.LeaveGroupRequest(group_id=self.group_id, member_id=member_id)
            )

    async def commit_offsets(
        self, generation_id: int, member_id: str, offsets: Mapping[TopicPartition, int]
    ) -> coordinator_pb2.OffsetCommitResponse:
        request = coordinator_pb2.OffsetCommitRequest(
            group_id=self.group_id,
            generation_id=generation_id,
            member_id=member_id,
            group_instance_id=self.settings.group_instance_id,
            partitions=[
                coordinator_pb2.OffsetCommitPartition(topic=tp.topic, partition=tp.partition, offset=offset)
                for tp, offset in sorted(offsets.items())
            ],
        )
        response = await self.link.call("OffsetCommit", request)
        assert isinstance(response, coordinator_pb2.OffsetCommitResponse)
        return response

    async def fetch_offsets(self, partitions: Sequence[TopicPartition]) -> coordinator_pb2.OffsetFetchResponse:
        """The committed offsets. read_committed asks for stable ones (KIP-447): an offset a
        transaction still open committed is asked for again until the transaction ends, so a
        consume-transform-produce member never starts from the offset before it."""
        request = coordinator_pb2.OffsetFetchRequest(
            group_id=self.group_id,
            partitions=[
                coordinator_pb2.OffsetCommitPartition(topic=tp.topic, partition=tp.partition) for tp in partitions
            ],
            require_stable=self.settings.isolation_level == "read_committed",
        )
        deadline = time.monotonic() + self.settings.request_timeout_ms / 1000
        while True:
            response = await self.link.call("OffsetFetch", request)
            assert isinstance(response, coordinator_pb2.OffsetFetchResponse)
            unstable = any(entry.error_code == ErrorCode.UNSTABLE_OFFSET_COMMIT for entry in response.partitions)
            if not unstable or time.monotonic() > deadline:
                return response
            await asyncio.sleep(self.settings.retry_backoff_ms / 1000)

    async def assign(self, joined: coordinator_pb2.JoinGroupResponse) -> list[coordinator_pb2.Assignment]:
        """As the leader: every member's partitions, by the assignor the group chose."""
        members = {member.member_id: decode_subscription(member.metadata) for member in joined.members}
        counts: dict[str, int] = {}
        for topic in sorted({topic for subscription in members.values() for topic in subscription.topics}):
            try:
                counts[topic] = len(await self.metadata.partitions_of(topic))
            except TidelogError:
                continue  # a topic nobody can read yet: assigned once it exists
        result = ASSIGNORS[joined.protocol_name].assign(members, counts)
        log.info(
            "group_assignment", group=self.group_id, generation=joined.generation_id, assignor=joined.protocol_name
        )
        return [
            coordinator_pb2.Assignment(member_id=member, assignment=encode_assignment(partitions))
            for member, partitions in result.items()
        ]
