"""Leader-epoch truncation (KIP-101/279) on real partition logs, without the network: where a log
is cut, and many partitions' truncations at once."""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.fake_clock import FakeClock
from tests.waiting import until
from tidelog.broker import follower_io, follower_truncation
from tidelog.broker.follower_io import cut
from tidelog.broker.follower_truncation import EPOCH_QUERY_RETRY_FIRST_S
from tidelog.broker.replica_fetcher import FollowedPartition, ReplicaFetcherManager
from tidelog.broker.storage import LogConfig, PartitionLog
from tidelog.broker.storage_io import StorageIo
from tidelog.common.errors import ErrorCode
from tidelog.common.record.batch import encode_batch
from tidelog.common.settings import BrokerSettings
from tidelog.server_common import loop_slices
from tidelog.v1 import broker_pb2


@pytest.fixture
def io() -> Iterator[StorageIo]:
    pool = StorageIo(4)
    yield pool
    pool.shutdown()


def _settings(**overrides: object) -> BrokerSettings:
    return BrokerSettings.from_configs(overrides)


def _patient() -> BrokerSettings:
    """A minute's backoff and long poll: nothing the test does not cause happens by itself."""
    return _settings(**{"replica.fetch.backoff.ms": 60_000, "replica.fetch.wait.max.ms": 60_000})


def _log(tmp_path: Path, name: str) -> PartitionLog:
    return PartitionLog.open(tmp_path / f"{name}-0", LogConfig.from_configs({}))


def _write(partition_log: PartitionLog, epoch: int, values: list[bytes]) -> None:
    partition_log.assign_leader_epoch(epoch)
    partition_log.append_as_leader(encode_batch(values), leader_epoch=epoch)


def _truncate_against(follower: PartitionLog, leader: PartitionLog) -> None:
    epoch, end = leader.end_offset_for_epoch(follower.leader_epochs.latest_epoch)
    cut(FollowedPartition("t", 0, follower, 1, 9), epoch, end)


def test_divergent_tail_is_cut_exactly_where_the_logs_split(tmp_path: Path) -> None:
    # Epoch 1: both have offsets 0-3. The old leader then wrote 4-5 in epoch 1 that never replicated,
    # and the new leader wrote 4-6 in epoch 2. The logs split at 4: that is where the cut must be.
    old_leader, new_leader = _log(tmp_path, "old"), _log(tmp_path, "new")
    for partition_log in (old_leader, new_leader):
        _write(partition_log, 1, [b"a", b"b", b"c", b"d"])
    _write(old_leader, 1, [b"lost-1", b"lost-2"])
    _write(new_leader, 2, [b"e", b"f", b"g"])
    _truncate_against(old_leader, new_leader)
    assert old_leader.log_end_offset == 4
    old_leader.append_as_follower(new_leader.read(4, 1 << 20))
    assert old_leader.log_end_offset == 7
    assert old_leader.leader_epochs.entries() == [(1, 0), (2, 4)]


def test_a_follower_behind_keeps_everything(tmp_path: Path) -> None:
    leader, follower = _log(tmp_path, "leader"), _log(tmp_path, "follower")
    _write(leader, 3, [b"a", b"b"])
    follower.append_as_follower(leader.read(0, 1 << 20))
    _write(leader, 3, [b"c", b"d"])
    _truncate_against(follower, leader)
    assert follower.log_end_offset == 2  # nothing diverged: nothing cut


def test_a_follower_with_an_epoch_the_leader_never_had(tmp_path: Path) -> None:
    # The follower led briefly in epoch 5 (unreplicated writes); the new leader went 4 -> 6.
    leader, follower = _log(tmp_path, "leader"), _log(tmp_path, "follower")
    _write(leader, 4, [b"a", b"b", b"c"])
    follower.append_as_follower(leader.read(0, 1 << 20))
    _write(follower, 5, [b"x", b"y"])
    _write(leader, 6, [b"d"])
    _truncate_against(follower, leader)  # leader answers for epoch 4: it ended at 3
    assert follower.log_end_offset == 3
    assert follower.leader_epochs.entries() == [(4, 0)]


def _following_leader_1(manager: ReplicaFetcherManager, tmp_path: Path, count: int) -> list[FollowedPartition]:
    """`count` partitions of topic t, offsets 0-2 in epoch 1 (a batch each: truncation cuts whole
    batches), followed from leader 1 at epoch 2, none truncated yet."""
    followed = []
    for partition in range(count):
        partition_log = PartitionLog.open(tmp_path / f"t-{partition}", LogConfig.from_configs({}))
        for value in (b"a", b"b", b"c"):
            _write(partition_log, 1, [value])
        followed.append(FollowedPartition("t", partition, partition_log, 1, 2))
    manager._by_leader[1] = {(one.topic, one.partition): one for one in followed}
    manager.followed.update(manager._by_leader[1])
    manager.truncation._untruncated[1] = set(manager._by_leader[1])
    return followed


class _EpochAnswers:
    """OffsetsForLeaderEpoch of a leader: each partition's answer, or NOT_LEADER_OR_FOLLOWER."""

    def __init__(self, answers: dict[int, tuple[int, int] | None]) -> None:
        self.answers = answers
        self.asked: list[list[int]] = []

    async def OffsetsForLeaderEpoch(  # noqa: N802
        self, request: broker_pb2.OffsetsForLeaderEpochRequest, timeout: float
    ) -> broker_pb2.OffsetsForLeaderEpochResponse:
        self.asked.append([asked.partition for asked in request.partitions])
        response = broker_pb2.OffsetsForLeaderEpochResponse()
        for asked in request.partitions:
            answer = self.answers[asked.partition]
            if answer is None:
                response.partitions.add(
                    topic=asked.topic, partition=asked.partition, error_code=int(ErrorCode.NOT_LEADER_OR_FOLLOWER)
                )
            else:
                response.partitions.add(
                    topic=asked.topic, partition=asked.partition, leader_epoch=answer[0], end_offset=answer[1]
                )
        return response


async def test_many_partitions_truncate_together_and_a_refused_one_is_asked_again_ever_later(
    tmp_path: Path, io: StorageIo
) -> None:
    # A broker back from a restart follows thousands of partitions: their truncations run side by
    # side on the I/O threads; a leader that refuses is asked again, ever later up to the backoff.
    clock = FakeClock()
    manager = ReplicaFetcherManager(2, io, _settings(**{"replica.fetch.backoff.ms": 60_000}), clock=clock)
    followed = _following_leader_1(manager, tmp_path, 150)
    answers: dict[int, tuple[int, int] | None] = {partition: (1, partition % 3) for partition in range(150)}
    answers[7] = None  # this leader does not lead partition 7 (yet)
    stub = _EpochAnswers(answers)
    cuts = await manager.truncation._truncate(stub, 1, followed)  # type: ignore[arg-type]
    assert cuts is not None
    await cuts
    for one in followed:
        if one.partition == 7:
            assert not one.truncated and one.log.log_end_offset == 3
        else:
            assert one.truncated and one.log.log_end_offset == one.partition % 3
    assert manager.truncation._untruncated[1] == {("t", 7)}
    # Asked again soon (the new leader's LeaderAndIsr is usually milliseconds away), then twice as
    # late each time, up to the backoff: not at every round.
    key = ("t", 7)
    assert manager.truncation._query_delay[key] == EPOCH_QUERY_RETRY_FIRST_S
    assert manager.truncation._query_after[key] == clock() + EPOCH_QUERY_RETRY_FIRST_S
    delays = [manager.truncation._query_delay[key]]
    for _ in range(25):
        await manager.truncation._truncate(stub, 1, [followed[7]])  # type: ignore[arg-type]
        delays.append(manager.truncation._query_delay[key])
    assert delays[:3] == [EPOCH_QUERY_RETRY_FIRST_S, 2 * EPOCH_QUERY_RETRY_FIRST_S, 4 * EPOCH_QUERY_RETRY_FIRST_S]
    assert delays[-1] == 60.0 and manager.truncation._query_after[key] == clock() + 60.0
    answers[7] = (1, 1)  # it leads now
    cuts = await manager.truncation._truncate(stub, 1, [followed[7]])  # type: ignore[arg-type]
    assert cuts is not None
    await cuts
    assert followed[7].truncated and followed[7].log.log_end_offset == 1
    assert key not in manager.truncation._query_delay and key not in manager.truncation._query_after
    for one in followed:
        one.log.close()


class _LeaderSoon(_EpochAnswers):
    """A new leader whose LeaderAndIsr comes after the follower's: it refuses the first epoch
    queries, then answers. Its fetches are recorded and long-poll for good."""

    def __init__(self, refusals: int) -> None:
        super().__init__({0: None})
        self.refusals = refusals
        self.fetches: list[list[int]] = []

    async def OffsetsForLeaderEpoch(  # noqa: N802
        self, request: broker_pb2.OffsetsForLeaderEpochRequest, timeout: float
    ) -> broker_pb2.OffsetsForLeaderEpochResponse:
        if len(self.asked) >= self.refusals:
            self.answers[0] = (2, 0)
        return await super().OffsetsForLeaderEpoch(request, timeout)

    async def Fetch(self, request: broker_pb2.FetchRequest, timeout: float) -> broker_pb2.FetchResponse:  # noqa: N802
        self.fetches.append([entry.partition for entry in request.partitions])
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")


async def test_a_follower_refused_by_a_leader_not_leading_yet_asks_again_soon_and_fetches_nothing_meanwhile(
    tmp_path: Path,
    io: StorageIo,
) -> None:
    # A controlled shutdown: the follower's LeaderAndIsr came first, its epoch query reached the new
    # leader before that one's own. Asked again only after replica.fetch.backoff.ms, with an empty
    # fetch long-polling meanwhile, every acks=all produce of the partition waited as long.
    manager = ReplicaFetcherManager(2, io, _patient())
    leader = _LeaderSoon(refusals=3)
    manager._stub = lambda leader_id: leader  # type: ignore[method-assign,assignment,return-value]
    partition_log = PartitionLog.open(tmp_path / "t-0", LogConfig.from_configs({}))
    try:
        manager.follow(FollowedPartition("t", 0, partition_log, 1, 2))
        await until(lambda: bool(leader.fetches))  # the old code waited the 60 s backoff here
        assert len(leader.asked) == 4  # three refusals, then the answer
        assert leader.fetches == [[0]]  # no fetch went out before the partition could be fetched
    finally:
        await manager.close()
        partition_log.close()


class _IdleLeader(_EpochAnswers):
    """A leader with nothing new: its first fetch opens session 7 at once, each later one
    long-polls its whole max_wait_ms, then answers empty. Records each fetch's partitions, session
    id and epoch, and wait."""

    def __init__(self, answers: dict[int, tuple[int, int] | None]) -> None:
        super().__init__(answers)
        self.fetches: list[tuple[list[int], int, int, int]] = []

    async def Fetch(self, request: broker_pb2.FetchRequest, timeout: float) -> broker_pb2.FetchResponse:  # noqa: N802
        self.fetches.append(
            (
                sorted(entry.partition for entry in request.partitions),
                request.session_id,
                request.session_epoch,
                request.max_wait_ms,
            )
        )
        if len(self.fetches) > 1:
            await asyncio.sleep(request.max_wait_ms / 1000)
        return broker_pb2.FetchResponse(session_id=7)


async def test_a_partition_followed_from_a_leader_we_long_poll_is_fetched_without_waiting_the_poll_out(
    tmp_path: Path,
    io: StorageIo,
) -> None:
    # A controlled shutdown moves a leadership to a broker we already fetch idle partitions from:
    # the long poll in flight does not list the new partition, and waiting it out (up to
    # replica.fetch.wait.max.ms) held back every acks=all produce of that partition. The poll is
    # cut short once the partition is ready, and the session goes on: a new one meant a full
    # fetch of every partition of that leader (thousands, 0.5 s in a rolling restart).
    manager = ReplicaFetcherManager(2, io, _patient())
    leader = _IdleLeader({0: (1, 0), 1: (1, 0)})
    manager._stub = lambda leader_id: leader  # type: ignore[method-assign,assignment,return-value]
    logs = [PartitionLog.open(tmp_path / f"t-{partition}", LogConfig.from_configs({})) for partition in (0, 1)]
    try:
        manager.follow(FollowedPartition("t", 0, logs[0], 1, 1))
        await until(lambda: len(leader.fetches) == 2)
        assert leader.fetches == [([0], 0, 0, 60_000), ([], 7, 1, 60_000)]  # opened, then a long poll of a minute
        manager.follow(FollowedPartition("t", 1, logs[1], 1, 1))
        await until(lambda: len(leader.fetches) == 3)  # the old code waited the minute out
        assert leader.fetches[2] == ([1], 7, 1, 60_000)  # the same session at the same epoch: only what is new
        async with asyncio.timeout(10):  # stopping still stops a fetcher in a long poll
            await manager.close()
    finally:
        for partition_log in logs:
            partition_log.close()


async def test_a_refused_epoch_query_is_asked_again_beside_the_long_poll_of_the_others(
    tmp_path: Path, io: StorageIo
) -> None:
    # A new leader refuses the epoch query of a partition it does not lead yet: asked again and
    # again meanwhile, while the partitions already fetched stay in their long poll (the fetcher
    # used to ask between two fetches, every partition of that leader waiting for each answer).
    manager = ReplicaFetcherManager(2, io, _patient())
    leader = _IdleLeader({0: (1, 0), 1: None})  # it does not lead partition 1 yet
    manager._stub = lambda leader_id: leader  # type: ignore[method-assign,assignment,return-value]
    logs = [PartitionLog.open(tmp_path / f"t-{partition}", LogConfig.from_configs({})) for partition in (0, 1)]
    try:
        manager.follow(FollowedPartition("t", 0, logs[0], 1, 1))
        manager.follow(FollowedPartition("t", 1, logs[1], 1, 1))
        await until(lambda: len(leader.fetches) == 2 and sum(1 in asked for asked in leader.asked) >= 3)
        assert [partitions for partitions, *_ in leader.fetches] == [[0], []]  # one long poll in flight
        leader.answers[1] = (1, 0)  # it leads now
        await until(lambda: len(leader.fetches) == 3)
        assert leader.fetches[2] == ([1], 7, 1, 60_000)
    finally:
        async with asyncio.timeout(10):
            await manager.close()
        for partition_log in logs:
            partition_log.close()


class _MovedOn(_EpochAnswers):
    """A leader that hears of a preferred election before the follower does: its first fetch
    answer refuses partition 0 (NOT_LEADER_OR_FOLLOWER) and carries partition 1's records; later
    fetches long-poll. Epoch queries about partition 0 are refused from then on."""

    def __init__(self, records: bytes) -> None:
        super().__init__({0: (1, 0), 1: (1, 0)})
        self.records = records
        self.fetches: list[tuple[list[int], list[int]]] = []  # (partitions listed, forgotten)

    async def Fetch(self, request: broker_pb2.FetchRequest, timeout: float) -> broker_pb2.FetchResponse:  # noqa: N802
        self.fetches.append(
            ([entry.partition for entry in request.partitions], [entry.partition for entry in request.forgotten])
        )
        if len(self.fetches) > 1:
            await asyncio.sleep(request.max_wait_ms / 1000)
            return broker_pb2.FetchResponse(session_id=7)
        self.answers[0] = None
        response = broker_pb2.FetchResponse(session_id=7)
        response.partitions.add(topic="t", partition=0, error_code=int(ErrorCode.NOT_LEADER_OR_FOLLOWER))
        response.partitions.add(topic="t", partition=1, high_watermark=1, log_end_offset=1, record_batches=self.records)
        return response


@contextlib.asynccontextmanager
async def _following_a_leader_that_moved_on(
    tmp_path: Path, io: StorageIo
) -> AsyncIterator[tuple[ReplicaFetcherManager, _MovedOn, list[PartitionLog]]]:
    """Partitions 0 and 1 followed from a `_MovedOn` leader, its first two fetches made."""
    source = _log(tmp_path, "source")
    _write(source, 1, [b"x"])
    manager = ReplicaFetcherManager(2, io, _patient())
    leader = _MovedOn(bytes(source.read(0, 1 << 20)))
    manager._stub = lambda leader_id: leader  # type: ignore[method-assign,assignment,return-value]
    logs = [PartitionLog.open(tmp_path / f"t-{partition}", LogConfig.from_configs({})) for partition in (0, 1)]
    try:
        for partition in (0, 1):
            manager.follow(FollowedPartition("t", partition, logs[partition], 1, 1))
        await until(lambda: len(leader.fetches) >= 2)
        yield manager, leader, logs
    finally:
        async with asyncio.timeout(10):
            await manager.close()
        for partition_log in (*logs, source):
            partition_log.close()


async def test_a_partition_whose_leadership_moved_waits_alone_and_the_others_are_fetched_on(
    tmp_path: Path, io: StorageIo
) -> None:
    # A preferred election: the old leader hears first, refuses the partition it gave up, and the
    # follower backed off its whole fetcher (replica.fetch.backoff.ms: a minute here), holding back
    # every acks=all produce of the leader's other partitions (a 0.2 s gap in a rolling restart).
    async with _following_a_leader_that_moved_on(tmp_path, io) as (manager, leader, logs):
        # (the old code backed off for the minute before the second fetch)
        assert sorted(leader.fetches[0][0]) == [0, 1]
        assert leader.fetches[1] == ([1], [0])  # partition 1 from its new end, partition 0 left out
        assert logs[1].log_end_offset == 1
        await until(lambda: sum(0 in asked for asked in leader.asked) >= 3)  # partition 0's epoch asked again, soon
        assert not manager.followed[("t", 0)].truncated


async def test_a_partition_forgotten_by_a_fetch_cut_short_is_listed_again_once_ready(
    tmp_path: Path, io: StorageIo
) -> None:
    # Whether the leader applied a fetch cut short is unknown (it may have, then taken it back,
    # or answered it just as it was cut): a partition that fetch dropped from the session, ready
    # again at the very position it was dropped at, must be listed again. Not listed, the leader
    # held it no more and the follower thought it did: no record of it came, and acks=all to it
    # waited 30 s for the ISR to drop the follower (seen once in 30 rolling restarts).
    async with _following_a_leader_that_moved_on(tmp_path, io) as (_, leader, _):
        assert leader.fetches[1] == ([1], [0])  # partition 0 dropped, long-polling
        leader.answers[0] = (1, 0)  # partition 0's leader leads now: ready again, at the same position
        await until(lambda: len(leader.fetches) >= 3)  # the poll is cut short for it
        assert 0 in leader.fetches[2][0], "listed again: the leader may hold it no more"


async def test_a_follower_moves_its_log_start_after_the_leaders_within_its_own_high_watermark(
    tmp_path: Path, io: StorageIo
) -> None:
    """DeleteRecords on the leader (the Kafka listener's): a follower's copy of the deleted records
    goes too, at its next fetch, but never past what it knows committed."""
    manager = ReplicaFetcherManager(2, io, _patient())
    follower = _log(tmp_path, "t")
    try:
        _write(follower, 0, [b"%d" % n for n in range(10)])
        follower.update_high_watermark(8)
        followed = FollowedPartition("t", 0, follower, 1, 9)
        await manager._apply(followed, broker_pb2.FetchPartitionResult(high_watermark=8, log_start_offset=5))
        assert follower.log_start_offset == 5
        await manager._apply(followed, broker_pb2.FetchPartitionResult(high_watermark=8, log_start_offset=10))
        assert follower.log_start_offset == 8  # its own high watermark bounds it
        await manager._apply(followed, broker_pb2.FetchPartitionResult(high_watermark=8, log_start_offset=3))
        assert follower.log_start_offset == 8  # never back
    finally:
        await manager.close()
        follower.close()


class _DeletedRecords(_EpochAnswers):
    """A leader whose DeleteRecords moved its log start to 6: its first fetch answer says so;
    later fetches long-poll. Each fetch's (fetch offset, log start) of partition 0 is kept."""

    def __init__(self) -> None:
        super().__init__({0: (0, 10)})
        self.listed: list[tuple[int, int | None]] = []

    async def Fetch(self, request: broker_pb2.FetchRequest, timeout: float) -> broker_pb2.FetchResponse:  # noqa: N802
        for entry in request.partitions:
            self.listed.append(
                (entry.fetch_offset, entry.log_start_offset if entry.HasField("log_start_offset") else None)
            )
        if len(self.listed) > 1:
            await asyncio.sleep(request.max_wait_ms / 1000)
            return broker_pb2.FetchResponse(session_id=7)
        response = broker_pb2.FetchResponse(session_id=7)
        response.partitions.add(topic="t", partition=0, high_watermark=10, log_end_offset=10, log_start_offset=6)
        return response


async def test_a_follower_tells_the_leader_its_new_log_start_in_the_next_fetch(tmp_path: Path, io: StorageIo) -> None:
    """The leader's low watermark (DeleteRecords waits for it) comes from its followers' fetches:
    a follower that moved its log start lists the partition again in its incremental session,
    though its log end did not move."""
    manager = ReplicaFetcherManager(2, io, _patient())
    leader = _DeletedRecords()
    manager._stub = lambda leader_id: leader  # type: ignore[method-assign,assignment,return-value]
    follower = _log(tmp_path, "t")
    try:
        _write(follower, 0, [b"%d" % n for n in range(10)])
        manager.follow(FollowedPartition("t", 0, follower, 1, 0))
        await until(lambda: len(leader.listed) >= 2)
        assert leader.listed == [(10, 0), (10, 6)]
        assert follower.log_start_offset == 6
    finally:
        async with asyncio.timeout(10):
            await manager.close()
        follower.close()


async def test_partitions_that_keep_everything_are_fetched_while_the_others_are_cut(
    tmp_path: Path, io: StorageIo, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A broker back from a crash: the leaderships its crash moved cut a third of its logs (records
    # acks=1 never replicated); the rest keep everything and must not wait for those cuts.
    release = threading.Event()

    def held_cut(*answer: object, **options: bool) -> None:
        assert release.wait(30), "never released"
        cut(*answer, **options)  # type: ignore[arg-type]

    monkeypatch.setattr(follower_truncation, "cut", held_cut)
    manager = ReplicaFetcherManager(2, io, _patient(), clock=FakeClock())
    followed = _following_leader_1(manager, tmp_path, 10)
    stub = _EpochAnswers({partition: (1, 3 if partition % 2 == 0 else 1) for partition in range(10)})
    cuts = await manager.truncation._truncate(stub, 1, followed)  # type: ignore[arg-type]
    assert cuts is not None
    kept, to_cut = followed[0::2], followed[1::2]
    assert all(one.truncated and one.log.log_end_offset == 3 for one in kept)  # fetched from now on
    assert not any(one.truncated for one in to_cut)
    assert manager.truncation._untruncated[1] == {("t", one.partition) for one in to_cut}
    assert manager.truncation._to_ask(1) == []  # nothing is asked again while the cuts run
    assert stub.asked == [list(range(10))]
    release.set()
    await cuts
    assert all(one.truncated and one.log.log_end_offset == 1 for one in to_cut)
    assert manager.truncation._untruncated[1] == set() and manager.truncation._cutting[1] == set()
    assert manager._wakeups[1].is_set()  # the fetcher takes them without waiting out a long poll
    for one in followed:
        one.log.close()


async def test_a_round_of_cuts_syncs_its_file_system_once_before_any_is_fetched(
    tmp_path: Path, io: StorageIo, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A follower back from a leader's crash cut 3,334 logs a record each; each cut fsynced its
    # checkpoints (~1.5 ms): 5 s before those partitions fetched again. The moved-back recovery
    # points and histories must still be durable before anything is appended past a cut.
    manager = ReplicaFetcherManager(2, io, _patient(), clock=FakeClock())
    followed = _following_leader_1(manager, tmp_path, 6)
    events: list[str] = []
    real_fsync, real_sync = os.fsync, follower_io.sync_filesystems
    monkeypatch.setattr(os, "fsync", lambda descriptor: (events.append("fsync"), real_fsync(descriptor))[1])

    def sync_filesystems(folders: set[Path]) -> None:
        events.append(f"syncfs {sorted(folders)} truncated={[one.truncated for one in followed]}")
        real_sync(folders)

    monkeypatch.setattr(follower_io, "sync_filesystems", sync_filesystems)
    stub = _EpochAnswers(dict.fromkeys(range(6), (1, 1)))
    cuts = await manager.truncation._truncate(stub, 1, followed)  # type: ignore[arg-type]
    assert cuts is not None
    await cuts
    assert events == [f"syncfs {[tmp_path]} truncated={[False] * 6}"]  # one sync, before any is fetched
    assert all(one.truncated and one.log.log_end_offset == 1 for one in followed)
    for one in followed:
        one.log.close()


async def test_a_cut_that_fails_is_asked_again_later_not_at_once(
    tmp_path: Path, io: StorageIo, monkeypatch: pytest.MonkeyPatch
) -> None:
    def failing_cut(*answer: object, **options: bool) -> None:
        raise OSError("the disk failed")

    monkeypatch.setattr(follower_truncation, "cut", failing_cut)
    clock = FakeClock()
    manager = ReplicaFetcherManager(2, io, _patient(), clock=clock)
    followed = _following_leader_1(manager, tmp_path, 2)
    cuts = await manager.truncation._truncate(_EpochAnswers({0: (1, 1), 1: (1, 1)}), 1, followed)  # type: ignore[arg-type]
    assert cuts is not None
    await cuts
    assert not any(one.truncated for one in followed) and all(one.log.log_end_offset == 3 for one in followed)
    assert manager.truncation._untruncated[1] == {("t", 0), ("t", 1)} and manager.truncation._cutting[1] == set()
    assert all(manager.truncation._query_after[("t", p)] == clock() + EPOCH_QUERY_RETRY_FIRST_S for p in (0, 1))
    for one in followed:
        one.log.close()


class _ManyAnswers(_EpochAnswers):
    """A leader whose first fetch answers partition 0 with records, then `count` - 1 partitions
    with their high watermark alone (a session's first answer at scale); later fetches long-poll."""

    def __init__(self, records: bytes, count: int) -> None:
        super().__init__(dict.fromkeys(range(count), (1, 0)))
        self.records = records
        self.count = count
        self.answered = asyncio.Event()
        self.fetches = 0

    async def Fetch(self, request: broker_pb2.FetchRequest, timeout: float) -> broker_pb2.FetchResponse:  # noqa: N802
        self.fetches += 1
        if self.answered.is_set():
            await asyncio.sleep(request.max_wait_ms / 1000)
            return broker_pb2.FetchResponse(session_id=7)
        response = broker_pb2.FetchResponse(session_id=7)
        response.partitions.add(topic="t", partition=0, high_watermark=1, log_end_offset=1, record_batches=self.records)
        for partition in range(1, self.count):
            response.partitions.add(topic="t", partition=partition, high_watermark=0, log_end_offset=0)
        self.answered.set()
        return response


async def test_a_fetch_answer_lets_the_loop_go_and_appends_nothing_to_a_partition_unfollowed_meanwhile(
    tmp_path: Path, io: StorageIo, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A session's first answer at 10,000 partitions held the follower's event loop for 0.3-0.5 s;
    # it now yields between slices (loop_slices.py). A partition this broker stops following
    # during a yield (a LeaderAndIsr made it leader) must not get the old leader's records after.
    monkeypatch.setattr(loop_slices, "LOOP_SLICE_S", 0.0)  # a yield at every partition
    source = _log(tmp_path, "source")
    _write(source, 1, [b"x"])
    count = 200
    manager = ReplicaFetcherManager(2, io, _patient())
    leader = _ManyAnswers(bytes(source.read(0, 1 << 20)), count)
    manager._stub = lambda leader_id: leader  # type: ignore[method-assign,assignment,return-value]
    logs = [PartitionLog.open(tmp_path / f"t-{partition}", LogConfig.from_configs({})) for partition in range(count)]
    turns_during_apply = 0
    try:
        for partition in range(count):
            manager.follow(FollowedPartition("t", partition, logs[partition], 1, 1))
        await leader.answered.wait()
        for _ in range(20):  # a few partitions into the answer's loop: partition 0's records taken in
            await asyncio.sleep(0)
        assert leader.fetches == 1  # (the loop is still under way)
        manager.unfollow(("t", 0))
        while leader.fetches < 2:  # the next fetch: the answer is applied
            turns_during_apply += 1
            await asyncio.sleep(0)
        assert turns_during_apply >= 10  # this task ran while the answer was applied
        assert logs[0].log_end_offset == 0  # not followed any more when the appends went out
    finally:
        async with asyncio.timeout(10):
            await manager.close()
        for partition_log in (*logs, source):
            partition_log.close()
