"""Consumer group membership and offsets for the `__consumer_offsets` partitions this instance owns.

As Kafka's GroupCoordinator, every write takes the shape "handle request → (response, records)" against the group's
state (group_state.py): the handler changes nothing, the records are appended to the group's partition of
`__consumer_offsets` (OffsetsWriter), then applied, then answered. Offsets and deletions are applied by `replay`
(group_replay.py), the path loading takes, so what a commit does and what a reload rebuilds cannot differ. A
leader's SyncGroup writes the group's record with the new assignment, then applies it (`_apply_assignment`: the
fields replay would set, keeping the waiting syncs and heartbeat times, which no record holds); group records are
replayed only when loading. Writes run to the end even if their caller goes (server_common/to_the_end.py).

JoinGroup and SyncGroup wait: a join is answered when every known member has rejoined (or the rebalance timeout
dropped the rest, or `group.initial.rebalance.delay.ms` passed for an empty group); a follower's sync is answered
when the leader's assignment is written. `tick()` runs the clocks: session expiry, rebalance timeouts, the initial
delay, offset retention.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Mapping
from typing import Final

import structlog

from tidelog.common.clock import wall_clock_ms
from tidelog.common.errors import ErrorCode, RemoteError, TidelogError
from tidelog.common.record.batch import RecordBatch
from tidelog.common.settings import CoordinatorSettings
from tidelog.coordinator import group_replay, group_views
from tidelog.coordinator.group import Group, Member, new_member_id
from tidelog.coordinator.group_replay import OffsetsWriter, Record, group_record, offset_commit_records
from tidelog.coordinator.group_state import GroupState
from tidelog.coordinator.group_views import described_group, fetched_offsets, join_response, listed_groups
from tidelog.coordinator.offsets_records import group_key, offset_key
from tidelog.server_common.metadata import offsets_partition_for
from tidelog.server_common.to_the_end import ToTheEnd
from tidelog.v1 import coordinator_pb2

__all__ = ["GroupCoordinator"]

log = structlog.get_logger(__name__)


GROUP_ID_BYTES_MAX: Final = 1024  # a group id longer than this is INVALID_GROUP_ID


_error = RemoteError  # a refusal: answered with its Kafka error code


class GroupCoordinator:
    def __init__(
        self,
        writer: OffsetsWriter,
        config: CoordinatorSettings,
        *,
        clock_ms: Callable[[], int] = wall_clock_ms,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.writer = writer
        self.config = config
        self.clock_ms = clock_ms  # wall time: commit timestamps and offset retention
        self.monotonic = monotonic  # sessions, rebalance deadlines, the initial delay
        self.groups: dict[int, dict[str, Group]] = {}  # owned and loaded partitions → their groups
        self.loading: set[int] = set()
        self.rebalances_completed = 0  # generations made here (metrics)
        self.writes = ToTheEnd()

    # ---- ownership -------------------------------------------------------------------------

    def partition_of(self, group_id: str) -> int:
        return offsets_partition_for(group_id, self.config.offsets_topic_num_partitions)

    def begin_loading(self, partition: int) -> None:
        self.loading.add(partition)
        self.groups[partition] = {}

    def finish_loading(self, partition: int) -> None:
        self.loading.discard(partition)
        now = self.monotonic()
        for group in self.groups.get(partition, {}).values():
            for member in group.members.values():
                member.last_heartbeat = now  # sessions restart at takeover
        log.info("offsets_partition_loaded", partition=partition, groups=len(self.groups.get(partition, {})))

    def unload(self, partition: int) -> None:
        """Stop serving a partition (lost or handed over): waiting joins and syncs fail over."""
        self.loading.discard(partition)
        for group in self.groups.pop(partition, {}).values():
            self._fail_waiters(group, ErrorCode.NOT_COORDINATOR, "the group moved to another coordinator")
        log.info("offsets_partition_unloaded", partition=partition)

    def _group(self, group_id: str, *, create: bool = False) -> Group:
        if not group_id or len(group_id.encode()) > GROUP_ID_BYTES_MAX:
            raise _error(ErrorCode.INVALID_GROUP_ID, "group id must be 1 to 1024 bytes")
        partition = self.partition_of(group_id)
        if partition in self.loading:
            raise _error(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, f"loading __consumer_offsets-{partition}")
        groups = self.groups.get(partition)
        if groups is None:
            raise _error(ErrorCode.NOT_COORDINATOR, f"this instance does not serve __consumer_offsets-{partition}")
        group = groups.get(group_id)
        if group is None:
            if not create:
                raise _error(ErrorCode.GROUP_ID_NOT_FOUND, f"group {group_id!r} does not exist")
            group = groups[group_id] = Group(group_id)
        return group

    # ---- replay ----------------------------------------------------------------------------

    def replay(self, partition: int, batch: RecordBatch) -> None:
        """Apply one stored batch of the partition, in log order (group_replay.py)."""
        group_replay.replay_batch(self.groups.setdefault(partition, {}), batch, self.monotonic())

    # ---- JoinGroup -------------------------------------------------------------------------

    async def join_group(self, request: coordinator_pb2.JoinGroupRequest) -> coordinator_pb2.JoinGroupResponse:
        config = self.config
        low, high = config.group_min_session_timeout_ms, config.group_max_session_timeout_ms
        if not low <= request.session_timeout_ms <= high:
            raise _error(ErrorCode.INVALID_SESSION_TIMEOUT, f"session.timeout.ms must be within [{low}, {high}]")
        protocols = [(protocol.name, bytes(protocol.metadata)) for protocol in request.protocols]
        if not protocols or not request.protocol_type:
            raise _error(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, "a join names a protocol type and assignors")
        group = self._group(request.group_id, create=True)
        if group.members and (request.protocol_type != group.protocol_type or not group.supports(protocols)):
            raise _error(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, "no assignor in common with the group's members")
        member_id = request.member_id
        instance_id = request.group_instance_id
        if instance_id:
            known = group.static_members.get(instance_id)
            if member_id and known and member_id != known:
                raise _error(ErrorCode.FENCED_INSTANCE_ID, f"instance {instance_id!r} joined again as another member")
            if not member_id and known:
                return self._static_rejoin(group, known, request, protocols)
        pending = bool(member_id) and group.take_pending(member_id, self.monotonic())  # KIP-394's second join
        if member_id and not pending and member_id not in group.members:
            raise _error(ErrorCode.UNKNOWN_MEMBER_ID, f"member {member_id!r} is not in group {group.group_id!r}")
        if not member_id and not instance_id and request.require_known_member_id:
            handed_out = group.hand_out(request.client_id, self.monotonic(), request.session_timeout_ms / 1000)
            return group_views.member_id_required(handed_out)
        if not member_id and len(group.members) >= config.group_max_size:
            raise _error(ErrorCode.REBALANCE_IN_PROGRESS, f"group.max.size={config.group_max_size} reached")
        future: asyncio.Future[coordinator_pb2.JoinGroupResponse] = asyncio.get_running_loop().create_future()
        member = group.members.get(member_id) if member_id else None
        if member is None:
            member = Member(
                member_id or new_member_id(request.client_id),
                instance_id,
                request.client_id,
                request.session_timeout_ms,
                request.rebalance_timeout_ms or request.session_timeout_ms,
                protocols,
                last_heartbeat=self.monotonic(),
            )
            group.add(member)
            group.protocol_type = request.protocol_type
            changed = True
        else:
            changed = member.protocols != protocols or member.member_id == group.leader
            member.protocols = protocols
            member.session_timeout_ms = request.session_timeout_ms
            member.rebalance_timeout_ms = request.rebalance_timeout_ms or request.session_timeout_ms
        if member.join is not None and not member.join.done():
            member.join.set_exception(_error(ErrorCode.REBALANCE_IN_PROGRESS, "superseded by a newer join"))
        member.last_heartbeat = self.monotonic()
        if group.state == GroupState.STABLE and not changed:
            # A follower rejoining with what it had: nothing to rebalance (Kafka does the same).
            return join_response(group, member, with_members=False)
        member.join = future
        if group.state != GroupState.PREPARING_REBALANCE:
            self._prepare_rebalance(group, reason=f"member {member.member_id} joined")
        elif group.join_ready_at:  # still in the initial delay: each newcomer extends it
            group.join_ready_at = min(
                self.monotonic() + config.group_initial_rebalance_delay_ms / 1000, group.rebalance_deadline
            )
        self._maybe_complete_join(group)
        return await future

    def _static_rejoin(
        self,
        group: Group,
        old_member_id: str,
        request: coordinator_pb2.JoinGroupRequest,
        protocols: list[tuple[str, bytes]],
    ) -> coordinator_pb2.JoinGroupResponse:
        """KIP-345: a static member back within its session takes its old place, usually without a rebalance."""
        old = group.members[old_member_id]
        new_id = new_member_id(request.client_id)
        was_leader = group.leader == old_member_id
        self._fail_member(old, ErrorCode.FENCED_INSTANCE_ID, "a newer process took this group.instance.id")
        group.remove(old_member_id)
        member = dataclasses.replace(
            old, member_id=new_id, client_id=request.client_id, protocols=protocols, join=None, sync=None
        )
        member.last_heartbeat = self.monotonic()
        group.add(member)
        if was_leader:
            group.leader = new_id
        log.info("static_member_rejoined", group=group.group_id, instance=old.group_instance_id, member=new_id)
        # Same assignors (their metadata may differ: a restarted process owns nothing yet): it keeps
        # its assignment, leader or not, and nobody rebalances (KIP-345's point).
        if group.state == GroupState.STABLE and [name for name, _ in old.protocols] == [name for name, _ in protocols]:
            member.protocols = [(name, old.metadata_for(name)) for name, _ in protocols]
            return join_response(group, member, with_members=False)
        self._prepare_rebalance(group, reason=f"static member {old.group_instance_id} rejoined")
        # Answered now with the current generation; the member learns of the rebalance by heartbeat.
        return join_response(group, member, with_members=False)

    def _prepare_rebalance(self, group: Group, *, reason: str) -> None:
        if group.state == GroupState.COMPLETING_REBALANCE:
            for member in group.members.values():
                if member.sync is not None and not member.sync.done():
                    member.sync.set_exception(_error(ErrorCode.REBALANCE_IN_PROGRESS, "the group is rebalancing"))
                member.sync = None
        was_empty = group.state == GroupState.EMPTY
        group.transition(GroupState.PREPARING_REBALANCE)
        now = self.monotonic()
        timeout_ms = max((member.rebalance_timeout_ms for member in group.members.values()), default=0)
        group.rebalance_deadline = now + timeout_ms / 1000
        group.join_ready_at = (
            min(now + self.config.group_initial_rebalance_delay_ms / 1000, group.rebalance_deadline)
            if was_empty
            else 0.0
        )
        log.info("rebalance_started", group=group.group_id, generation=group.generation_id, reason=reason)

    def _maybe_complete_join(self, group: Group, *, deadline_passed: bool = False) -> None:
        if group.state != GroupState.PREPARING_REBALANCE:
            return
        now = self.monotonic()
        if deadline_passed:
            for member in [member for member in group.members.values() if member.join is None]:
                log.info("member_removed_by_rebalance_timeout", group=group.group_id, member=member.member_id)
                group.remove(member.member_id)
        elif not group.all_joined and group.members:
            return
        if group.join_ready_at and now < group.join_ready_at and not deadline_passed:
            return
        self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        group.generation_id += 1
        self.rebalances_completed += 1
        group.join_ready_at = 0.0
        if not group.members:
            group.transition(GroupState.EMPTY)
            group.protocol_name = ""
            group.leader = ""
            group.empty_since_ms = self.clock_ms()
            self._persist_soon(group)
            log.info("group_empty", group=group.group_id, generation=group.generation_id)
            return
        protocol = group.choose_protocol()
        assert protocol is not None, "joins were checked against the group's assignors"
        group.protocol_name = protocol
        if group.leader not in group.members:
            group.leader = next(iter(group.members))
        group.transition(GroupState.COMPLETING_REBALANCE)
        now = self.monotonic()
        for member in group.members.values():
            member.assignment = b""
            member.last_heartbeat = now
            if member.join is not None and not member.join.done():
                member.join.set_result(join_response(group, member, with_members=member.member_id == group.leader))
            member.join = None
        log.info(
            "rebalance_joined",
            group=group.group_id,
            generation=group.generation_id,
            members=len(group.members),
            protocol=protocol,
        )

    # ---- SyncGroup -------------------------------------------------------------------------

    def _member(self, group: Group, member_id: str, instance_id: str, generation_id: int | None) -> Member:
        if instance_id:
            known = group.static_members.get(instance_id)
            if known is not None and known != member_id:
                raise _error(ErrorCode.FENCED_INSTANCE_ID, f"instance {instance_id!r} belongs to another member now")
        member = group.members.get(member_id)
        if member is None:
            raise _error(ErrorCode.UNKNOWN_MEMBER_ID, f"member {member_id!r} is not in group {group.group_id!r}")
        if generation_id is not None and generation_id != group.generation_id:
            raise _error(
                ErrorCode.ILLEGAL_GENERATION, f"generation {generation_id}; the group is at {group.generation_id}"
            )
        return member

    async def sync_group(self, request: coordinator_pb2.SyncGroupRequest) -> coordinator_pb2.SyncGroupResponse:
        group = self._group(request.group_id)
        member = self._member(group, request.member_id, request.group_instance_id, request.generation_id)
        if group.state == GroupState.PREPARING_REBALANCE:
            raise _error(ErrorCode.REBALANCE_IN_PROGRESS, "the group is rebalancing: join again")
        if group.state == GroupState.STABLE:
            return coordinator_pb2.SyncGroupResponse(assignment=member.assignment)
        assert group.state == GroupState.COMPLETING_REBALANCE, group.state
        future: asyncio.Future[coordinator_pb2.SyncGroupResponse] = asyncio.get_running_loop().create_future()
        member.sync = future
        if member.member_id == group.leader:
            generation = group.generation_id
            assignments = {entry.member_id: bytes(entry.assignment) for entry in request.assignments}
            records = [group_record(group, assignments)]  # nothing changes before it is written

            async def write_then_apply() -> None:
                try:
                    await self.writer.append(self.partition_of(group.group_id), records)
                except Exception as error:
                    log.warning("group_write_failed", group=group.group_id, error=str(error))
                    if group.state == GroupState.COMPLETING_REBALANCE and group.generation_id == generation:
                        self._prepare_rebalance(group, reason="the assignment could not be written")
                    raise _error(
                        ErrorCode.COORDINATOR_NOT_AVAILABLE, f"the assignment could not be written: {error}"
                    ) from error
                self._apply_assignment(group, generation, assignments)

            await self.writes.run(write_then_apply())
        return await future

    def _apply_assignment(self, group: Group, generation: int, assignments: Mapping[str, bytes]) -> None:
        """The leader's assignment, written: the group is Stable with it and every waiting sync is
        answered — unless the generation moved on while it was written (a member left, a new one
        joined), whose own rebalance hands out the next assignment."""
        if group.state != GroupState.COMPLETING_REBALANCE or group.generation_id != generation:
            return
        for other in group.members.values():
            other.assignment = assignments.get(other.member_id, b"")
        group.transition(GroupState.STABLE)
        for other in group.members.values():
            if other.sync is not None and not other.sync.done():
                other.sync.set_result(coordinator_pb2.SyncGroupResponse(assignment=other.assignment))
            other.sync = None
        log.info("group_stable", group=group.group_id, generation=generation, members=len(group.members))

    # ---- Heartbeat, LeaveGroup -------------------------------------------------------------

    def heartbeat(self, request: coordinator_pb2.HeartbeatRequest) -> coordinator_pb2.HeartbeatResponse:
        group = self._group(request.group_id)
        member = self._member(group, request.member_id, request.group_instance_id, None)
        member.last_heartbeat = self.monotonic()
        if request.generation_id != group.generation_id:
            raise _error(
                ErrorCode.ILLEGAL_GENERATION,
                f"generation {request.generation_id}; the group is at {group.generation_id}",
            )
        if group.state == GroupState.PREPARING_REBALANCE:
            raise _error(ErrorCode.REBALANCE_IN_PROGRESS, "the group is rebalancing: join again")
        return coordinator_pb2.HeartbeatResponse()

    def leave_group(self, request: coordinator_pb2.LeaveGroupRequest) -> coordinator_pb2.LeaveGroupResponse:
        group = self._group(request.group_id)
        member_id = request.member_id or group.static_members.get(request.group_instance_id, "")
        member = self._member(group, member_id, request.group_instance_id, None)
        self._remove_member(group, member, reason="left")
        return coordinator_pb2.LeaveGroupResponse()

    def _remove_member(self, group: Group, member: Member, *, reason: str) -> None:
        self._fail_member(member, ErrorCode.UNKNOWN_MEMBER_ID, f"member {reason}")
        group.remove(member.member_id)
        log.info("member_removed", group=group.group_id, member=member.member_id, reason=reason)
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, reason=f"member {member.member_id} {reason}")
        self._maybe_complete_join(group)

    def _fail_member(self, member: Member, code: ErrorCode, message: str) -> None:
        for waiter in (member.join, member.sync):
            if waiter is not None and not waiter.done():
                waiter.set_exception(_error(code, message))
        member.join = member.sync = None

    def _fail_waiters(self, group: Group, code: ErrorCode, message: str) -> None:
        for member in group.members.values():
            self._fail_member(member, code, message)

    # ---- offsets ---------------------------------------------------------------------------

    async def commit_offsets(
        self, request: coordinator_pb2.OffsetCommitRequest
    ) -> coordinator_pb2.OffsetCommitResponse:
        """The records an accepted commit makes true change the state through `replay` once
        written, as they do when loading: nothing changes before."""
        group = self.committing_group(
            request.group_id, request.generation_id, request.member_id, request.group_instance_id
        )
        response, records = offset_commit_records(group.group_id, request.partitions, self.clock_ms())
        await self._append_and_replay(self.partition_of(request.group_id), records)
        return response

    def committing_group(
        self, group_id: str, generation_id: int, member_id: str, instance_id: str, *, transactional: bool = False
    ) -> Group:
        """The group an OffsetCommit or TxnOffsetCommit (KIP-447) goes to, if the committer may commit
        now; a TxnOffsetCommit without a generation (a producer before KIP-447) is not checked."""
        group = self._group(group_id, create=generation_id < 0)
        # Kafka's handleCommitOffsets, in its order (docs/coordinator.md has the table). A member of the current
        # generation commits in Stable and PreparingRebalance alike: one that commits what it processed before it
        # rejoins (onJoinPrepare) then processes nothing twice. Refused while the new assignment is handed out.
        if generation_id < 0 and (not group.members or transactional):
            pass  # a group without members: `group reset-offsets`, a consumer assigning by hand
        elif group.state == GroupState.COMPLETING_REBALANCE:
            raise _error(
                ErrorCode.REBALANCE_IN_PROGRESS, "the group is handing out a new assignment: commit after SyncGroup"
            )
        elif generation_id < 0:
            raise _error(ErrorCode.UNKNOWN_MEMBER_ID, "the group has members: commit as one of them")
        else:
            self._member(group, member_id, instance_id, generation_id)
        return group

    async def _append_and_replay(self, partition: int, records: list[Record]) -> None:
        """Write a handler's records (acks=all), then apply them through `replay`, as loading does.
        A partition lost meanwhile is left to its new owner, which loads the records from the log."""
        if not records:
            return

        async def write_then_apply() -> None:
            try:
                await self.writer.append(partition, records)
            except Exception as error:
                raise _error(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"records could not be written: {error}") from error
            if partition in self.groups and partition not in self.loading:
                for key, value in records:
                    group_replay.replay(self.groups[partition], key, value, self.monotonic())

        await self.writes.run(write_then_apply())

    def fetch_offsets(self, request: coordinator_pb2.OffsetFetchRequest) -> coordinator_pb2.OffsetFetchResponse:
        try:
            group = self._group(request.group_id)
        except TidelogError as error:
            if error.code != ErrorCode.GROUP_ID_NOT_FOUND:
                raise
            group = Group(request.group_id)  # no group: nothing committed
        return fetched_offsets(group, request)

    # ---- listing, describing, deleting -----------------------------------------------------

    def list_groups(self) -> list[coordinator_pb2.ListedGroup]:
        return listed_groups(self.groups, self.loading)

    def describe_group(self, group_id: str) -> coordinator_pb2.DescribedGroup:
        described = coordinator_pb2.DescribedGroup(group_id=group_id)
        try:
            group = self._group(group_id)
        except TidelogError as error:
            if error.code != ErrorCode.GROUP_ID_NOT_FOUND:
                described.error_code = int(error.code)
            described.state = GroupState.DEAD.value
            return described
        return described_group(group)

    async def delete_group(self, group_id: str) -> None:
        group = self._group(group_id)
        if group.members:
            raise _error(ErrorCode.NON_EMPTY_GROUP, f"group {group_id!r} has members")
        records: list[Record] = [(offset_key(group_id, topic, partition), None) for topic, partition in group.offsets]
        records.append((group_key(group_id), None))  # tombstones: compaction removes the group for good
        await self._append_and_replay(self.partition_of(group_id), records)
        group.transition(GroupState.DEAD)
        log.info("group_deleted", group=group_id)

    # ---- clocks ----------------------------------------------------------------------------

    async def tick(self) -> None:
        """Session expiry, rebalance deadlines, the initial delay, offset retention."""
        now, now_ms = self.monotonic(), self.clock_ms()
        expired_groups: list[Group] = []
        for partition, groups in list(self.groups.items()):
            if partition in self.loading:
                continue
            for group in list(groups.values()):
                for member in [member for member in group.members.values() if member.expired(now)]:
                    self._remove_member(group, member, reason="expired (session.timeout.ms)")
                if group.state == GroupState.PREPARING_REBALANCE:
                    self._maybe_complete_join(group, deadline_passed=now >= group.rebalance_deadline)
                if group.state == GroupState.EMPTY and (group.offsets or group.generation_id):
                    # Retention counts from when the group became empty, or from its last commit.
                    last_commit = max((entry.commit_timestamp_ms for entry in group.offsets.values()), default=0)
                    if now_ms - max(group.empty_since_ms, last_commit) > self.config.offsets_retention_minutes * 60_000:
                        expired_groups.append(group)
        for group in expired_groups:
            log.info("group_offsets_expired", group=group.group_id, offsets=len(group.offsets))
            try:
                await self.delete_group(group.group_id)
            except TidelogError as error:
                log.info("group_expiry_failed", group=group.group_id, error=str(error))

    def _persist_soon(self, group: Group) -> None:
        """Write the group's record without holding up the caller (it is rewritten at every change)."""
        partition, record = self.partition_of(group.group_id), group_record(group)

        async def write() -> None:
            try:
                await self.writer.append(partition, [record])
            except Exception as error:
                log.warning("group_write_failed", group=group.group_id, error=str(error))

        self.writes.in_background(write())
