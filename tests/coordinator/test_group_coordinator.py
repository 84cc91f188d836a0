"""The coordinator's state machine in-process; its records go to a list (cluster tests use real logs)."""

from __future__ import annotations

import asyncio

import pytest

from tests.fake_clock import FakeClock
from tests.waiting import until
from tidelog.common.errors import ErrorCode, TidelogError
from tidelog.common.record.batch import decode_batch, encode_batch
from tidelog.common.settings import CoordinatorSettings
from tidelog.coordinator.group_coordinator import GroupCoordinator
from tidelog.coordinator.group_state import GroupState, IllegalTransitionError, check_transition
from tidelog.v1 import coordinator_pb2


class RecordingWriter:
    def __init__(self) -> None:
        self.records: list[tuple[int, bytes, bytes | None]] = []

    async def append(self, partition: int, records: list[tuple[bytes, bytes | None]]) -> None:
        self.records.extend((partition, key, value) for key, value in records)

    def replay_into(self, group_coordinator: GroupCoordinator) -> None:
        """Load what was written, as a new owner reads it: a stored batch a record."""
        for partition, key, value in self.records:
            group_coordinator.replay(partition, decode_batch(encode_batch([value], keys=[key])))


def coordinator(writer: RecordingWriter, clock: FakeClock | None = None) -> GroupCoordinator:
    settings = CoordinatorSettings.from_configs(
        {"group.initial.rebalance.delay.ms": 0, "offsets.topic.num.partitions": 1}
    )
    group_coordinator = GroupCoordinator(writer, settings, monotonic=clock or FakeClock())
    group_coordinator.begin_loading(0)
    group_coordinator.finish_loading(0)
    return group_coordinator


def join(member_id: str = "", protocols: tuple[str, ...] = ("range",)) -> coordinator_pb2.JoinGroupRequest:
    return coordinator_pb2.JoinGroupRequest(
        group_id="g",
        session_timeout_ms=10_000,
        rebalance_timeout_ms=5_000,
        member_id=member_id,
        protocol_type="consumer",
        protocols=[coordinator_pb2.Protocol(name=name, metadata=b"m") for name in protocols],
        client_id="c",
    )


def test_the_transition_table_refuses_illegal_moves() -> None:
    check_transition(GroupState.EMPTY, GroupState.PREPARING_REBALANCE)
    with pytest.raises(IllegalTransitionError):
        check_transition(GroupState.EMPTY, GroupState.STABLE)
    with pytest.raises(IllegalTransitionError):
        check_transition(GroupState.STABLE, GroupState.COMPLETING_REBALANCE)


async def test_two_members_join_vote_sync_and_a_stale_generation_is_refused() -> None:
    writer = RecordingWriter()
    group_coordinator = coordinator(writer)
    first = await group_coordinator.join_group(join(protocols=("roundrobin", "range")))
    assert first.generation_id == 1 and first.leader == first.member_id and first.member_id.startswith("c-")
    # A second member: the first must rejoin; both answers come together, with a new generation.
    second_join = asyncio.create_task(group_coordinator.join_group(join(protocols=("range", "roundrobin"))))
    await asyncio.sleep(0)
    first_again = await group_coordinator.join_group(join(first.member_id, protocols=("roundrobin", "range")))
    second = await second_join
    assert first_again.generation_id == second.generation_id == 2
    assert first_again.protocol_name in {"range", "roundrobin"}  # a tie: the first member's preference wins
    assert len(first_again.members) == 2 and not second.members  # only the leader sees the members
    follower_sync = asyncio.create_task(
        group_coordinator.sync_group(
            coordinator_pb2.SyncGroupRequest(group_id="g", generation_id=2, member_id=second.member_id)
        )
    )
    await asyncio.sleep(0)
    leader_sync = await group_coordinator.sync_group(
        coordinator_pb2.SyncGroupRequest(
            group_id="g",
            generation_id=2,
            member_id=first.member_id,
            assignments=[
                coordinator_pb2.Assignment(member_id=first.member_id, assignment=b"A"),
                coordinator_pb2.Assignment(member_id=second.member_id, assignment=b"B"),
            ],
        )
    )
    assert leader_sync.assignment == b"A" and (await follower_sync).assignment == b"B"
    assert writer.records, "the assignment was written before it was handed out"
    with pytest.raises(TidelogError) as stale:
        group_coordinator.heartbeat(
            coordinator_pb2.HeartbeatRequest(group_id="g", generation_id=1, member_id=second.member_id)
        )
    assert stale.value.code == ErrorCode.ILLEGAL_GENERATION
    with pytest.raises(TidelogError) as unknown:
        group_coordinator.heartbeat(coordinator_pb2.HeartbeatRequest(group_id="g", generation_id=2, member_id="nobody"))
    assert unknown.value.code == ErrorCode.UNKNOWN_MEMBER_ID
    with pytest.raises(TidelogError) as outsider:
        await group_coordinator.commit_offsets(coordinator_pb2.OffsetCommitRequest(group_id="g", generation_id=-1))
    assert outsider.value.code == ErrorCode.UNKNOWN_MEMBER_ID  # the group has members: commit as one


async def test_a_kafka_clients_first_join_gets_a_member_id_and_a_lost_answer_leaves_no_member_behind() -> None:
    """KIP-394 (JoinGroup v4+): the first join only hands out a member id. Without it, a join whose
    answer was lost (the client gave up and joined again) stayed a member, got partitions in the
    next generation and held them, unread, until its session timed out."""
    clock = FakeClock()
    group_coordinator = coordinator(RecordingWriter(), clock)
    first_try = join()
    first_try.require_known_member_id = True
    lost = await group_coordinator.join_group(first_try)  # its answer never reaches the client
    assert lost.error_code == ErrorCode.MEMBER_ID_REQUIRED and lost.member_id.startswith("c-")
    again = await group_coordinator.join_group(first_try)
    assert again.error_code == ErrorCode.MEMBER_ID_REQUIRED and again.member_id != lost.member_id
    joined = await group_coordinator.join_group(join(again.member_id))
    assert (joined.error_code, joined.member_id, joined.leader) == (0, again.member_id, again.member_id)
    assert [member.member_id for member in joined.members] == [again.member_id]  # no phantom of the lost one
    clock.advance(10.0)  # past the session timeout: a handed-out id not used by then is forgotten
    with pytest.raises(TidelogError) as expired:
        await group_coordinator.join_group(join(lost.member_id))
    assert expired.value.code == ErrorCode.UNKNOWN_MEMBER_ID


async def test_bad_joins_are_refused() -> None:
    group_coordinator = coordinator(RecordingWriter())
    short = join()
    short.session_timeout_ms = 10
    with pytest.raises(TidelogError) as invalid:
        await group_coordinator.join_group(short)
    assert invalid.value.code == ErrorCode.INVALID_SESSION_TIMEOUT
    await group_coordinator.join_group(join(protocols=("range",)))
    with pytest.raises(TidelogError) as inconsistent:
        await group_coordinator.join_group(join(protocols=("sticky",)))
    assert inconsistent.value.code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    with pytest.raises(TidelogError) as unknown:
        await group_coordinator.join_group(join("ghost"))
    assert unknown.value.code == ErrorCode.UNKNOWN_MEMBER_ID


async def test_a_group_made_by_a_standalone_commit_is_kept_and_its_offsets_are_replayed() -> None:
    writer = RecordingWriter()
    group_coordinator = coordinator(writer)
    request = coordinator_pb2.OffsetCommitRequest(
        group_id="g", generation_id=-1, partitions=[coordinator_pb2.OffsetCommitPartition(topic="t", offset=7)]
    )
    await group_coordinator.commit_offsets(request)
    await group_coordinator.tick()  # retention counts from the commit, not from 1970
    fetched = group_coordinator.fetch_offsets(coordinator_pb2.OffsetFetchRequest(group_id="g"))
    assert [(entry.topic, entry.offset) for entry in fetched.partitions] == [("t", 7)]
    replayed = coordinator(RecordingWriter())
    writer.replay_into(replayed)
    again = replayed.fetch_offsets(coordinator_pb2.OffsetFetchRequest(group_id="g"))
    assert [(entry.topic, entry.offset) for entry in again.partitions] == [("t", 7)]


class FailingWriter(RecordingWriter):
    async def append(self, partition: int, records: list[tuple[bytes, bytes | None]]) -> None:
        raise OSError("the offsets partition has no leader")


def _commit(offset: int, *, metadata: str = "") -> coordinator_pb2.OffsetCommitRequest:
    return coordinator_pb2.OffsetCommitRequest(
        group_id="g",
        generation_id=-1,
        partitions=[coordinator_pb2.OffsetCommitPartition(topic="t", partition=0, offset=offset, metadata=metadata)],
    )


def _offsets(group_coordinator: GroupCoordinator) -> list[tuple[str, int, int]]:
    fetched = group_coordinator.fetch_offsets(coordinator_pb2.OffsetFetchRequest(group_id="g"))
    return [(entry.topic, entry.partition, entry.offset) for entry in fetched.partitions]


async def test_a_commit_changes_the_state_only_through_its_written_records() -> None:
    group_coordinator = coordinator(RecordingWriter())
    await group_coordinator.commit_offsets(_commit(5))
    group_coordinator.writer = FailingWriter()
    with pytest.raises(TidelogError) as refused:
        await group_coordinator.commit_offsets(_commit(9))
    assert refused.value.code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert _offsets(group_coordinator) == [("t", 0, 5)]  # nothing of the unwritten commit is visible


async def test_a_commit_answered_while_the_partition_moved_away_leaves_it_to_the_new_owner() -> None:
    class MovingWriter(RecordingWriter):
        def __init__(self, owner: list[GroupCoordinator]) -> None:
            super().__init__()
            self.owner = owner

        async def append(self, partition: int, records: list[tuple[bytes, bytes | None]]) -> None:
            await super().append(partition, records)
            self.owner[0].unload(partition)  # lost ownership while the write was under way

    owner: list[GroupCoordinator] = []
    group_coordinator = coordinator(MovingWriter(owner))
    owner.append(group_coordinator)
    await group_coordinator.commit_offsets(_commit(3))
    assert 0 not in group_coordinator.groups  # replay did not bring the partition back to life


async def test_a_deleted_group_is_tombstoned_and_gone_on_reload_too() -> None:
    writer = RecordingWriter()
    group_coordinator = coordinator(writer)
    await group_coordinator.commit_offsets(_commit(5))
    await group_coordinator.delete_group("g")
    assert _offsets(group_coordinator) == []
    assert [value for _, _, value in writer.records[-2:]] == [None, None]  # offset and group tombstones
    described = group_coordinator.describe_group("g")
    assert (described.state, described.error_code) == (GroupState.DEAD.value, 0)
    reloaded = coordinator(RecordingWriter())
    writer.replay_into(reloaded)
    assert _offsets(reloaded) == []


async def test_a_silent_member_expires_after_its_session_and_a_heartbeating_one_does_not() -> None:
    clock = FakeClock()
    group_coordinator = coordinator(RecordingWriter(), clock)
    joined = await group_coordinator.join_group(join())  # session.timeout.ms 10 s
    sync = coordinator_pb2.SyncGroupRequest(
        group_id="g", generation_id=joined.generation_id, member_id=joined.member_id
    )
    await group_coordinator.sync_group(sync)
    beat = coordinator_pb2.HeartbeatRequest(
        group_id="g", generation_id=joined.generation_id, member_id=joined.member_id
    )
    for _ in range(3):  # 3 x 6 s with a heartbeat each time: alive at 18 s, past one session
        clock.now += 6
        group_coordinator.heartbeat(beat)
        await group_coordinator.tick()
    assert group_coordinator.describe_group("g").state == GroupState.STABLE.value
    clock.now += 10.001  # silent for longer than session.timeout.ms
    await group_coordinator.tick()
    described = group_coordinator.describe_group("g")
    assert (described.state, len(described.members)) == (GroupState.EMPTY.value, 0)
    with pytest.raises(TidelogError) as gone:
        group_coordinator.heartbeat(beat)
    assert gone.value.code == ErrorCode.UNKNOWN_MEMBER_ID


def _member_commit(member_id: str, generation_id: int, offset: int) -> coordinator_pb2.OffsetCommitRequest:
    return coordinator_pb2.OffsetCommitRequest(
        group_id="g",
        generation_id=generation_id,
        member_id=member_id,
        partitions=[coordinator_pb2.OffsetCommitPartition(topic="t", partition=0, offset=offset)],
    )


async def _refused(code: ErrorCode, pending: object) -> None:
    with pytest.raises(TidelogError) as refused:
        await pending  # type: ignore[misc]
    assert refused.value.code == code


async def test_commit_rules_by_state_as_kafkas_group_coordinator() -> None:
    """Issue 39: a current member's commit was refused in PreparingRebalance. Kafka takes it there
    and in Stable, refuses it with REBALANCE_IN_PROGRESS only in CompletingRebalance, and fences
    stale generations and unknown members."""
    writer = RecordingWriter()
    group_coordinator = coordinator(writer)
    first = await group_coordinator.join_group(join())
    await group_coordinator.sync_group(
        coordinator_pb2.SyncGroupRequest(
            group_id="g",
            generation_id=1,
            member_id=first.member_id,
            assignments=[coordinator_pb2.Assignment(member_id=first.member_id, assignment=b"A")],
        )
    )
    await group_coordinator.commit_offsets(_member_commit(first.member_id, 1, 10))  # Stable
    second_join = asyncio.create_task(group_coordinator.join_group(join()))
    await asyncio.sleep(0)
    assert group_coordinator.describe_group("g").state == GroupState.PREPARING_REBALANCE.value
    await group_coordinator.commit_offsets(_member_commit(first.member_id, 1, 11))  # taken: the current generation
    assert group_coordinator.fetch_offsets(coordinator_pb2.OffsetFetchRequest(group_id="g")).partitions[0].offset == 11
    await _refused(
        ErrorCode.ILLEGAL_GENERATION, group_coordinator.commit_offsets(_member_commit(first.member_id, 0, 12))
    )
    await _refused(ErrorCode.UNKNOWN_MEMBER_ID, group_coordinator.commit_offsets(_member_commit("nobody", 1, 12)))
    first_again = await group_coordinator.join_group(join(first.member_id))
    second = await second_join
    assert group_coordinator.describe_group("g").state == GroupState.COMPLETING_REBALANCE.value
    await _refused(
        ErrorCode.REBALANCE_IN_PROGRESS, group_coordinator.commit_offsets(_member_commit(first.member_id, 2, 12))
    )
    await _refused(ErrorCode.REBALANCE_IN_PROGRESS, group_coordinator.commit_offsets(_member_commit("", -1, 12)))
    assert first_again.generation_id == second.generation_id == 2
    assert group_coordinator.fetch_offsets(coordinator_pb2.OffsetFetchRequest(group_id="g")).partitions[0].offset == 11


def _leader_sync(leader: coordinator_pb2.JoinGroupResponse, assignment: bytes) -> coordinator_pb2.SyncGroupRequest:
    """The leader's SyncGroup, assigning `assignment` to itself (the only member)."""
    return coordinator_pb2.SyncGroupRequest(
        group_id="g",
        member_id=leader.member_id,
        generation_id=leader.generation_id,
        assignments=[coordinator_pb2.Assignment(member_id=leader.member_id, assignment=assignment)],
    )


class HeldWriter(RecordingWriter):
    """Holds each append until the test releases it, or fails it."""

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()
        self.failure: Exception | None = None

    async def append(self, partition: int, records: list[tuple[bytes, bytes | None]]) -> None:
        await self.release.wait()
        if self.failure is not None:
            raise self.failure
        await super().append(partition, records)


async def test_a_leaders_assignment_applies_only_once_its_record_is_written() -> None:
    writer = HeldWriter()
    group_coordinator = coordinator(writer)  # type: ignore[arg-type]
    leader = await group_coordinator.join_group(join())
    sync = _leader_sync(leader, b"a0")
    answered = asyncio.create_task(group_coordinator.sync_group(sync))
    await asyncio.sleep(0)  # the handler runs up to the write
    described = group_coordinator.describe_group("g")
    assert described.state == GroupState.COMPLETING_REBALANCE.value
    assert [member.assignment for member in described.members] == [b""], "nothing applied before the write"
    writer.release.set()
    assert (await answered).assignment == b"a0"
    assert group_coordinator.describe_group("g").state == GroupState.STABLE.value
    assert len(writer.records) == 1  # the group's record, with the assignment


async def test_a_leaders_assignment_that_cannot_be_written_changes_nothing_and_the_group_rebalances() -> None:
    writer = HeldWriter()
    writer.failure = RuntimeError("no leader for __consumer_offsets-0")
    writer.release.set()
    group_coordinator = coordinator(writer)  # type: ignore[arg-type]
    leader = await group_coordinator.join_group(join())
    sync = _leader_sync(leader, b"a0")
    with pytest.raises(TidelogError) as refused:
        await group_coordinator.sync_group(sync)
    assert refused.value.code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    described = group_coordinator.describe_group("g")
    assert described.state == GroupState.PREPARING_REBALANCE.value
    assert [member.assignment for member in described.members] == [b""]
    assert writer.records == []


async def test_a_commit_whose_caller_went_away_is_applied_once_written() -> None:
    """gRPC cancels the handler of a client that disconnected (a consumer killed mid-commit): the
    write goes on, and what is written is applied, or the state falls behind the log."""

    class SlowWriter(RecordingWriter):
        def __init__(self) -> None:
            super().__init__()
            self.written = asyncio.Event()

        async def append(self, partition: int, records: list[tuple[bytes, bytes | None]]) -> None:
            await self.written.wait()
            await super().append(partition, records)

    writer = SlowWriter()
    group_coordinator = coordinator(writer)
    handler = asyncio.create_task(group_coordinator.commit_offsets(_commit(8)))
    await asyncio.sleep(0)
    handler.cancel()
    with pytest.raises(asyncio.CancelledError):
        await handler
    writer.written.set()
    await until(lambda: _offsets(group_coordinator) == [("t", 0, 8)])
    assert len(writer.records) == 1
