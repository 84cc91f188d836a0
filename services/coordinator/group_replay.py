"""The group state as `__consumer_offsets` records and back (Kafka's GroupMetadataManager's
storeGroup and loadGroupsAndOffsets): the record a group is written as, the records an offset
commit writes, and `replay`, which applies each record to the state — when a coordinator loads a
partition it takes over, and after a handler's records are written, so what a handler does and
what a reload rebuilds go through one path.

`replay_batch` applies a whole stored batch: a transactional one (TxnOffsetCommit) holds offsets
pending until its producer's marker, which `complete_txn_offsets` applies or drops.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from tidelog.common.errors import ErrorCode
from tidelog.common.record.batch import RecordBatch
from tidelog.common.record.control import marker_of
from tidelog.coordinator.group import Group, Member, OffsetEntry
from tidelog.coordinator.group_state import GroupState
from tidelog.coordinator.offsets_records import decode_key, group_key, offset_key
from tidelog.v1 import coordinator_pb2

__all__ = [
    "OFFSET_METADATA_BYTES_MAX",
    "OffsetsWriter",
    "Record",
    "complete_txn_offsets",
    "group_record",
    "offset_commit_records",
    "pend_txn_offset",
    "replay",
    "replay_batch",
]

Record = tuple[bytes, bytes | None]  # (key, value); a None value is a tombstone

OFFSET_METADATA_BYTES_MAX = 4096  # offset.metadata.max.bytes (Kafka's default)


class OffsetsWriter(Protocol):
    """What writes a handler's records (offsets_writer.py: fenced, idempotent, acks=all)."""

    async def append(self, partition: int, records: list[Record]) -> None:
        """Durably append (acks=all) to one __consumer_offsets partition, or raise."""


def replay_batch(groups: dict[str, Group], batch: RecordBatch, now: float) -> None:
    """Apply one stored batch of a partition, in log order (loading, and the partition's tail)."""
    header = batch.header
    if header.is_control:
        complete_txn_offsets(groups, header.producer_id, commit=marker_of(batch).commit)
        return
    for key, value in zip(batch.keys, batch.values, strict=True):
        if key is None:
            continue
        if header.is_transactional:
            pend_txn_offset(groups, header.producer_id, key, value)
        else:
            replay(groups, key, value, now)


def pend_txn_offset(groups: dict[str, Group], producer_id: int, key_bytes: bytes, value: bytes | None) -> None:
    """An offset committed in `producer_id`'s open transaction: held until its marker."""
    key = decode_key(key_bytes)
    if not key.HasField("offset") or value is None:
        return  # a transaction commits offsets only
    group = groups.get(key.offset.group_id)
    if group is None:
        group = groups[key.offset.group_id] = Group(key.offset.group_id)
    stored = coordinator_pb2.OffsetValue.FromString(value)
    pending = group.pending_txn_offsets.setdefault(producer_id, {})
    pending[(key.offset.topic, key.offset.partition)] = OffsetEntry(
        stored.offset, stored.metadata, stored.commit_timestamp_ms
    )


def complete_txn_offsets(groups: dict[str, Group], producer_id: int, *, commit: bool) -> None:
    """The producer's transaction ended: its offsets join the groups' (commit) or go (abort)."""
    for group in groups.values():
        pending = group.pending_txn_offsets.pop(producer_id, None)
        if pending and commit:
            group.offsets.update(pending)


def replay(groups: dict[str, Group], key_bytes: bytes, value: bytes | None, now: float) -> None:
    """Apply one record of a partition to its groups, in log order: when loading, and after a
    handler's records are written. `now`: the monotonic time members' sessions restart from."""
    key = decode_key(key_bytes)
    if key.HasField("offset"):
        group = groups.get(key.offset.group_id)
        if value is None:
            if group is not None:
                group.offsets.pop((key.offset.topic, key.offset.partition), None)
            return
        if group is None:
            group = groups[key.offset.group_id] = Group(key.offset.group_id)
        stored = coordinator_pb2.OffsetValue.FromString(value)
        group.offsets[(key.offset.topic, key.offset.partition)] = OffsetEntry(
            stored.offset, stored.metadata, stored.commit_timestamp_ms
        )
    elif key.HasField("group") and key.group.group_id:
        group_id = key.group.group_id
        if value is None:
            groups.pop(group_id, None)
            return
        stored_group = coordinator_pb2.GroupValue.FromString(value)
        group = groups.get(group_id) or Group(group_id)
        groups[group_id] = group
        group.protocol_type = stored_group.protocol_type
        group.protocol_name = stored_group.protocol_name
        group.generation_id = stored_group.generation_id
        group.members.clear()
        group.static_members.clear()
        group.leader = ""
        for stored_member in stored_group.members:
            group.add(
                Member(
                    stored_member.member_id,
                    stored_member.group_instance_id,
                    stored_member.client_id,
                    stored_member.session_timeout_ms,
                    stored_member.rebalance_timeout_ms,
                    [(stored_group.protocol_name, stored_member.subscription)],
                    assignment=stored_member.assignment,
                    last_heartbeat=now,
                )
            )
        group.leader = stored_group.leader if stored_group.leader in group.members else group.leader
        # Loading sets the state as written, not through a transition: it is not a change.
        group.state = GroupState.STABLE if group.members else GroupState.EMPTY
        group.empty_since_ms = stored_group.state_timestamp_ms


def group_record(group: Group, assignments: Mapping[str, bytes] | None = None) -> Record:
    """The group as its record: a snapshot of its generation and members, with `assignments`
    (by member id) in place of the members' own when given (a leader's SyncGroup, before it
    is applied)."""
    value = coordinator_pb2.GroupValue(
        protocol_type=group.protocol_type,
        generation_id=group.generation_id,
        protocol_name=group.protocol_name,
        leader=group.leader,
        state_timestamp_ms=group.empty_since_ms,
        members=[
            coordinator_pb2.GroupMemberValue(
                member_id=member.member_id,
                group_instance_id=member.group_instance_id,
                client_id=member.client_id,
                session_timeout_ms=member.session_timeout_ms,
                rebalance_timeout_ms=member.rebalance_timeout_ms,
                subscription=member.metadata_for(group.protocol_name),
                assignment=member.assignment if assignments is None else assignments.get(member.member_id, b""),
            )
            for member in group.members.values()
        ],
    )
    return group_key(group.group_id), value.SerializeToString()


def offset_commit_records(
    group_id: str, partitions: Sequence[coordinator_pb2.OffsetCommitPartition], now_ms: int
) -> tuple[coordinator_pb2.OffsetCommitResponse, list[Record]]:
    """An accepted OffsetCommit's answer and the records that make it true; a partition whose
    offset or metadata is out of bounds gets INVALID_REQUEST and no record."""
    records: list[Record] = []
    response = coordinator_pb2.OffsetCommitResponse()
    for entry in partitions:
        result = response.partitions.add(topic=entry.topic, partition=entry.partition, offset=entry.offset)
        if entry.offset < 0 or len(entry.metadata) > OFFSET_METADATA_BYTES_MAX:
            result.error_code = int(ErrorCode.INVALID_REQUEST)
            continue
        value = coordinator_pb2.OffsetValue(offset=entry.offset, metadata=entry.metadata, commit_timestamp_ms=now_ms)
        records.append((offset_key(group_id, entry.topic, entry.partition), value.SerializeToString()))
    return response, records
