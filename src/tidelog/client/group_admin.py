"""Consumer group administration: list, describe (with lag), reset offsets, delete.

Each group is reached through its coordinator (coordinator_link.py); listing asks one coordinator
instance, which gathers every instance's groups.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from tidelog.client.assignors import decode_assignment
from tidelog.client.cluster_metadata import TopicPartition
from tidelog.client.connections import Connections
from tidelog.client.consumer import Consumer
from tidelog.client.coordinator_link import CoordinatorLink
from tidelog.common.errors import ErrorCode, TidelogError, error_for
from tidelog.common.settings import SecuritySettings
from tidelog.v1 import coordinator_pb2

__all__ = ["GroupAdmin", "GroupDescription", "MemberDescription", "PartitionLag"]

LATEST = -1


@dataclasses.dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    group_instance_id: str
    client_id: str
    partitions: list[TopicPartition]


@dataclasses.dataclass(frozen=True, slots=True)
class PartitionLag:
    partition: TopicPartition
    committed: int | None
    end_offset: int

    @property
    def lag(self) -> int | None:
        return None if self.committed is None else max(self.end_offset - self.committed, 0)


@dataclasses.dataclass(frozen=True, slots=True)
class GroupDescription:
    group_id: str
    state: str
    protocol: str
    generation_id: int
    members: list[MemberDescription]
    partitions: list[PartitionLag]


class GroupAdmin:
    def __init__(
        self,
        bootstrap: Sequence[str],
        *,
        request_timeout_ms: int = 30_000,
        security: SecuritySettings | Mapping[str, object] | None = None,
    ) -> None:
        self.connections = Connections(security)
        self.consumer = Consumer(bootstrap, connections=self.connections, request_timeout_ms=request_timeout_ms)
        self.request_timeout_s = request_timeout_ms / 1000

    async def __aenter__(self) -> GroupAdmin:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.consumer.close()
        await self.connections.close()

    def _link(self, group_id: str) -> CoordinatorLink:
        return CoordinatorLink(
            group_id,
            self.consumer.metadata,
            self.connections,
            request_timeout_s=self.request_timeout_s,
            retry_backoff_s=0.1,
        )

    async def list_groups(self) -> list[coordinator_pb2.ListedGroup]:
        # Any group id leads to some instance; that one gathers the others' groups.
        response = await self._link("__list__").call("ListGroups", coordinator_pb2.ListGroupsRequest())
        if response.error_code:
            raise error_for(response.error_code, "not every coordinator instance answered")
        return list(response.groups)

    async def describe_group(
        self, group_id: str, *, end_offsets: Mapping[TopicPartition, int] | None = None
    ) -> GroupDescription:
        """State, members, and each partition's committed offset and lag (against `end_offsets`
        when the caller has them, else the leaders' log end offsets, asked now)."""
        link = self._link(group_id)
        described = await link.call("DescribeGroups", coordinator_pb2.DescribeGroupsRequest(group_ids=[group_id]))
        group = described.groups[0]
        if group.error_code:
            raise error_for(group.error_code, f"group {group_id!r}")
        fetched = await link.call("OffsetFetch", coordinator_pb2.OffsetFetchRequest(group_id=group_id))
        if fetched.error_code:
            raise error_for(fetched.error_code, fetched.error_message)
        committed = {TopicPartition(entry.topic, entry.partition): entry.offset for entry in fetched.partitions}
        members = [
            MemberDescription(
                member.member_id, member.group_instance_id, member.client_id, decode_assignment(member.assignment)
            )
            for member in group.members
        ]
        partitions = set(committed) | {tp for member in members for tp in member.partitions}
        if end_offsets is not None:
            ends = dict(end_offsets)
        else:
            ends = await self.consumer.list_offsets(sorted(partitions), LATEST) if partitions else {}
        lags = [
            PartitionLag(tp, committed[tp] if committed.get(tp, -1) >= 0 else None, ends.get(tp, -1))
            for tp in sorted(partitions)
        ]
        return GroupDescription(group_id, group.state, group.protocol_name, group.generation_id, members, lags)

    async def reset_offsets(self, group_id: str, offsets: Mapping[TopicPartition, int]) -> None:
        """Commit these offsets for a group without members (Kafka's --reset-offsets --execute)."""
        response = await self._link(group_id).call(
            "OffsetCommit",
            coordinator_pb2.OffsetCommitRequest(
                group_id=group_id,
                generation_id=-1,
                partitions=[
                    coordinator_pb2.OffsetCommitPartition(topic=tp.topic, partition=tp.partition, offset=offset)
                    for tp, offset in sorted(offsets.items())
                ],
            ),
        )
        if response.error_code:
            if response.error_code == ErrorCode.UNKNOWN_MEMBER_ID:
                raise error_for(ErrorCode.NON_EMPTY_GROUP, f"group {group_id!r} has active members: stop them first")
            raise error_for(response.error_code, response.error_message)

    async def delete_groups(self, group_ids: Sequence[str]) -> dict[str, TidelogError | None]:
        results: dict[str, TidelogError | None] = {}
        for group_id in group_ids:
            response = await self._link(group_id).call(
                "DeleteGroups", coordinator_pb2.DeleteGroupsRequest(group_ids=[group_id])
            )
            result = response.groups[0]
            results[group_id] = error_for(result.error_code, result.error_message) if result.error_code else None
        return results
