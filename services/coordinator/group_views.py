"""How groups are shown to clients: a JoinGroup answer, ListGroups' entries, DescribeGroups'
description. Built from the group's state; nothing here changes it."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

from tidelog.common.errors import ErrorCode
from tidelog.coordinator.group import Group, Member
from tidelog.v1 import coordinator_pb2

__all__ = [
    "described_group",
    "fetched_offsets",
    "join_response",
    "listed_group",
    "listed_groups",
    "member_id_required",
]


def member_id_required(member_id: str) -> coordinator_pb2.JoinGroupResponse:
    """KIP-394's answer to a first join: the member id to join with."""
    return coordinator_pb2.JoinGroupResponse(
        error_code=int(ErrorCode.MEMBER_ID_REQUIRED),
        error_message="join again with this member id",
        member_id=member_id,
    )


def join_response(group: Group, member: Member, *, with_members: bool) -> coordinator_pb2.JoinGroupResponse:
    """A JoinGroup answer; the leader's (`with_members`) lists every member's subscription to assign."""
    response = coordinator_pb2.JoinGroupResponse(
        generation_id=group.generation_id,
        protocol_name=group.protocol_name,
        leader=group.leader,
        member_id=member.member_id,
    )
    if with_members:
        response.members.extend(
            coordinator_pb2.JoinGroupMember(
                member_id=other.member_id,
                group_instance_id=other.group_instance_id,
                metadata=other.metadata_for(group.protocol_name),
            )
            for other in group.members.values()
        )
    return response


def listed_group(group: Group) -> coordinator_pb2.ListedGroup:
    return coordinator_pb2.ListedGroup(
        group_id=group.group_id, state=group.state.value, protocol_type=group.protocol_type
    )


def described_group(group: Group) -> coordinator_pb2.DescribedGroup:
    described = coordinator_pb2.DescribedGroup(group_id=group.group_id)
    described.state = group.state.value
    described.protocol_type = group.protocol_type
    described.protocol_name = group.protocol_name
    described.generation_id = group.generation_id
    described.members.extend(
        coordinator_pb2.DescribedMember(
            member_id=member.member_id,
            group_instance_id=member.group_instance_id,
            client_id=member.client_id,
            assignment=member.assignment,
        )
        for member in group.members.values()
    )
    return described


def fetched_offsets(group: Group, request: coordinator_pb2.OffsetFetchRequest) -> coordinator_pb2.OffsetFetchResponse:
    """The committed offsets asked for (every one the group has when none are named); -1 where
    nothing was committed; UNSTABLE_OFFSET_COMMIT, with `require_stable`, where a transaction not
    ended yet committed one."""
    response = coordinator_pb2.OffsetFetchResponse()
    wanted: Iterable[tuple[str, int]] = (
        [(entry.topic, entry.partition) for entry in request.partitions]
        if request.partitions
        else sorted(group.offsets)
    )
    pending = {key for offsets in group.pending_txn_offsets.values() for key in offsets}
    for topic, partition in wanted:
        stored = group.offsets.get((topic, partition))
        result = response.partitions.add(
            topic=topic,
            partition=partition,
            offset=-1 if stored is None else stored.offset,
            metadata="" if stored is None else stored.metadata,
        )
        if request.require_stable and (topic, partition) in pending:
            result.error_code = int(ErrorCode.UNSTABLE_OFFSET_COMMIT)  # KIP-447: ask again once it ends
    return response


def listed_groups(
    groups: Mapping[int, Mapping[str, Group]], loading: Collection[int]
) -> list[coordinator_pb2.ListedGroup]:
    """ListGroups' answer: the groups of every loaded partition."""
    return [
        listed_group(group)
        for partition, partition_groups in sorted(groups.items())
        if partition not in loading
        for group in partition_groups.values()
    ]
