"""The replica manager's leader side on real partition logs, without the network: what an
acks=all produce may acknowledge when leadership moves under it, and what a leader believes of
its followers across their restarts (issue 12).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import grpc
import pytest
import structlog.testing

from tests.broker.storage.conftest import held_by_a_thread, read_all
from tests.cluster.conftest import wait_until
from tests.fake_clock import FakeClock
from tests.waiting import until
from tidelog.broker import epoch_waits, storage_io
from tidelog.broker.delayed_fetch import full_reads, session_reads
from tidelog.broker.epoch_waits import until_any_epoch_known
from tidelog.broker.fetch_session import FetchSession, SessionError
from tidelog.broker.isr_manager import INELIGIBLE_RETRY_S, IsrManager
from tidelog.broker.metadata_cache import MetadataCache
from tidelog.broker.partition import Partition
from tidelog.broker.replica_manager import ReplicaManager, in_rounds
from tidelog.broker.storage import AppendInfo
from tidelog.common.errors import ErrorCode, NotLeaderOrFollowerError, TidelogError
from tidelog.common.record.batch import decode_batch, encode_batch, restamp
from tidelog.common.settings import BrokerSettings
from tidelog.server_common import long_lived_heap, loop_slices
from tidelog.v1 import broker_pb2, common_pb2, controller_pb2, controller_pb2_grpc

TOPIC = "t"
ME = 1
OTHER = 2
THIRD = 3


def _settings(**overrides: object) -> BrokerSettings:
    return BrokerSettings.from_configs({"num.io.threads": 2, **overrides})


@pytest.fixture
async def replicas(tmp_path: Path) -> AsyncIterator[ReplicaManager]:
    manager = ReplicaManager(ME, tmp_path, _settings())
    try:
        yield manager
    finally:
        await manager.close()


async def _apply(
    manager: ReplicaManager,
    *,
    leader: int,
    leader_epoch: int,
    partition_epoch: int,
    isr: list[int],
    extra: tuple[int, ...] | list[int] = (),
    full: bool = False,
) -> None:
    state = common_pb2.PartitionState(
        topic=TOPIC,
        partition=0,
        leader=leader,
        isr=isr,
        replicas=[ME, OTHER, *extra],
        leader_epoch=leader_epoch,
        partition_epoch=partition_epoch,
        controller_epoch=1,
        topic_id="id-1",
    )
    errors = await manager.states.leader_and_isr(
        broker_pb2.LeaderAndIsrRequest(
            controller_id=1,
            controller_epoch=1,
            partitions=[state],
            broker_incarnation=manager.incarnation,
            full=full,
        )
    )
    assert not errors


def _whole_push(manager: ReplicaManager, count: int) -> broker_pb2.LeaderAndIsrRequest:
    """A controller's whole push to `manager`: partitions 0..count-1 of TOPIC, all led by it."""
    return broker_pb2.LeaderAndIsrRequest(
        controller_id=1,
        controller_epoch=1,
        broker_incarnation=manager.incarnation,
        full=True,
        partitions=_many_states(count, ME, 1),
    )


def _many_states(count: int, leader: int, leader_epoch: int) -> list[common_pb2.PartitionState]:
    """Partitions 0..count-1 of TOPIC, replicas and ISR [ME, OTHER], in one epoch."""
    return [
        common_pb2.PartitionState(
            topic=TOPIC,
            partition=partition,
            leader=leader,
            isr=[ME, OTHER],
            replicas=[ME, OTHER],
            leader_epoch=leader_epoch,
            partition_epoch=leader_epoch,
            controller_epoch=1,
            topic_id="id-1",
        )
        for partition in range(count)
    ]


def _fetch(offset: int, leader_epoch: int) -> broker_pb2.FetchPartition:
    return broker_pb2.FetchPartition(topic=TOPIC, partition=0, fetch_offset=offset, current_leader_epoch=leader_epoch)


def _fetching_in_a_session(manager: ReplicaManager, replica: int, offset: int, life: str) -> FetchSession:
    """`replica` opens a follower fetch session holding partition 0 and fetches it at `offset`."""
    session = manager.followers.sessions.resolve(broker_pb2.FetchRequest(replica_id=replica, session_id=0))
    assert session is not None
    session.update([_fetch(offset, 1)], [])
    manager.followers.record_fetch(replica, life, [_fetch(offset, 1)], session)
    return session


async def test_a_deposed_leader_never_acknowledges_a_batch_it_truncated(replicas: ReplicaManager) -> None:
    # The run in issue 12: a leader appends a batch at offset 0 and waits for the ISR (acks=all). It
    # is frozen; another replica is elected (epoch 2) and writes another producer's record at
    # offset 0. Resumed, the old leader becomes a follower, truncates its batch, fetches the new
    # leader's record and takes its high watermark, 1. Its waiting produce must fail, not answer
    # "offset 0": offset 0 holds someone else's record.
    await _apply(replicas, leader=ME, leader_epoch=1, partition_epoch=1, isr=[ME, OTHER])
    partition = replicas.partitions[(TOPIC, 0)]
    waiting = asyncio.create_task(replicas.append(TOPIC, 0, encode_batch([b"mine"]), acks=-1, timeout_s=10))
    await wait_until(lambda: _end_is(replicas, 1), timeout_s=10, what="the leader's append")
    assert not waiting.done()

    await _apply(replicas, leader=OTHER, leader_epoch=2, partition_epoch=2, isr=[OTHER])
    # What the follower path does next (the fetcher here has no endpoint for broker 2):
    partition.log.truncate_to(0)
    other_log_batch = bytearray(encode_batch([b"theirs"]))
    restamp(memoryview(other_log_batch), base_offset=0, partition_leader_epoch=2, log_append_time=None)
    partition.log.append_as_follower(bytes(other_log_batch))
    partition.log.update_high_watermark(1)

    with pytest.raises(NotLeaderOrFollowerError, match="leader epoch 1 ended"):
        await asyncio.wait_for(waiting, 5)
    assert partition.log.read(0, 1 << 20)  # offset 0 is the other producer's, and was not acknowledged


async def test_a_leader_deposed_and_elected_again_does_not_acknowledge_its_old_epoch(
    replicas: ReplicaManager,
) -> None:
    # A → B → A: back as leader in epoch 3, the HW passes the offset again, but the batch of epoch 1
    # may have been truncated in between; only "still leader in the epoch of the append" counts.
    await _apply(replicas, leader=ME, leader_epoch=1, partition_epoch=1, isr=[ME, OTHER])
    waiting = asyncio.create_task(replicas.append(TOPIC, 0, encode_batch([b"mine"]), acks=-1, timeout_s=10))
    await wait_until(lambda: _end_is(replicas, 1), timeout_s=10, what="the leader's append")
    await _apply(replicas, leader=OTHER, leader_epoch=2, partition_epoch=2, isr=[OTHER, ME])
    await _apply(replicas, leader=ME, leader_epoch=3, partition_epoch=3, isr=[ME])  # HW may now pass 1
    with pytest.raises(NotLeaderOrFollowerError):
        await asyncio.wait_for(waiting, 5)


async def test_acks_all_completes_when_the_follower_has_the_batch(replicas: ReplicaManager) -> None:
    await _apply(replicas, leader=ME, leader_epoch=1, partition_epoch=1, isr=[ME, OTHER])
    waiting = asyncio.create_task(replicas.append(TOPIC, 0, encode_batch([b"a", b"b"]), acks=-1, timeout_s=10))
    await wait_until(lambda: _end_is(replicas, 2), timeout_s=10, what="the leader's append")
    assert replicas.followers.record_fetch(OTHER, "life-1", [_fetch(1, 1)]) == {}
    await asyncio.sleep(0)
    assert not waiting.done(), "the follower has offset 0 only"
    replicas.followers.record_fetch(OTHER, "life-1", [_fetch(2, 1)])
    info = await asyncio.wait_for(waiting, 5)
    assert (info.first_offset, info.last_offset) == (0, 1)


async def test_an_acks_all_wait_the_isr_never_answers_times_out_and_says_where_it_stood(
    replicas: ReplicaManager,
) -> None:
    # A leader whose HW stood still for the request's whole timeout answers REQUEST_TIMED_OUT and
    # logs the partition's state: the fault tests report these waits (tests/faults/nemesis.py).
    await _apply(replicas, leader=ME, leader_epoch=1, partition_epoch=1, isr=[ME, OTHER])
    with structlog.testing.capture_logs() as logged, pytest.raises(TidelogError) as refused:
        await replicas.append(TOPIC, 0, encode_batch([b"a"]), acks=-1, timeout_s=0.2)
    assert refused.value.code == ErrorCode.REQUEST_TIMED_OUT
    (stuck,) = [entry for entry in logged if entry["event"] == "produce_replication_timed_out"]
    assert stuck["waited_for"] == 1 and stuck["high_watermark"] == 0 and stuck["log_end"] == 1
    assert stuck["isr"] == [ME, OTHER] and stuck["leader_epoch"] == 1


async def test_an_append_admitted_in_an_older_epoch_is_refused_once_fenced(replicas: ReplicaManager) -> None:
    # The append runs on the I/O pool; if the replica became a follower meanwhile, the append must
    # not land after the follower's truncation (a record the new leader never had, at an offset it
    # will fill with another): the log refuses appends as leader in an epoch below its fence.
    await _apply(replicas, leader=ME, leader_epoch=1, partition_epoch=1, isr=[ME, OTHER])
    partition_log = replicas.partitions[(TOPIC, 0)].log
    await _apply(replicas, leader=OTHER, leader_epoch=2, partition_epoch=2, isr=[OTHER, ME])
    with pytest.raises(NotLeaderOrFollowerError, match="has seen epoch 2"):
        partition_log.append_as_leader(encode_batch([b"late"]), leader_epoch=1)
    assert partition_log.log_end_offset == 0


async def test_a_restarted_follower_is_judged_on_its_new_life_only(replicas: ReplicaManager) -> None:
    # Issue 12, third finding: the leader re-added a restarted broker to the ISR on its previous
    # life's fetch position. A fetch from a new life resets what the leader knows of it.
    await _apply(replicas, leader=ME, leader_epoch=1, partition_epoch=1, isr=[ME])
    partition = replicas.partitions[(TOPIC, 0)]
    await replicas.append(TOPIC, 0, encode_batch([b"x"] * 10), acks=1)
    replicas.followers.record_fetch(OTHER, "life-1", [_fetch(10, 1)])
    assert partition.follower_end[OTHER] == 10
    assert OTHER in partition.follower_caught_up_s
    replicas.followers.record_fetch(OTHER, "life-2", [_fetch(4, 1)])  # restarted, truncated to 4
    assert partition.follower_end[OTHER] == 4
    assert OTHER not in partition.follower_caught_up_s, "the new life has not caught up yet"
    assert partition.follower_incarnation[OTHER] == "life-2"


async def test_a_requests_batches_of_one_partition_append_in_order_then_wait_for_the_isr_once(
    replicas: ReplicaManager,
) -> None:
    """A producer's request may carry several batches of one partition (batch.size splits a large
    send): they append a round each, in order, and the ISR is waited for once after the last. The
    old way waited after each round: 8 batches cost 8 follower round trips."""
    await _apply(replicas, leader=ME, leader_epoch=1, partition_epoch=1, isr=[ME, OTHER])
    rounds = [[(TOPIC, 0, encode_batch([b"a", b"b"]))], [(TOPIC, 0, encode_batch([b"c"]))]]
    waiting = asyncio.create_task(replicas.append_rounds(rounds, acks=-1, timeout_s=10))
    # Both rounds are in the log before the follower has fetched anything.
    await wait_until(lambda: _end_is(replicas, 3), timeout_s=5, what="both rounds appended before any replication")
    assert not waiting.done()
    replicas.followers.record_fetch(OTHER, "life-1", [_fetch(3, 1)])
    first, second = await asyncio.wait_for(waiting, 5)
    assert [(info.first_offset, info.last_offset) for (info,) in (first, second)] == [(0, 1), (2, 2)]


async def test_a_requests_rounds_go_to_the_io_threads_in_one_pass_each_partitions_in_order(
    replicas: ReplicaManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    """All rounds of a request are appended by one pass of I/O tasks, a partition's entries in
    their order, each with its own outcome: a thread hop a round (each waits for the GIL and the
    event loop) made 8 batches of one partition cost 7.7 ms of local time for 0.4 ms of appends.
    (Appends above INLINE_BYTES_MAX: below it they stay on the loop, the next test.)"""
    monkeypatch.setattr(storage_io, "INLINE_BYTES_MAX", 0)
    await _apply(replicas, leader=ME, leader_epoch=1, partition_epoch=1, isr=[ME])
    passes: list[int] = []
    each_chunk = replicas.io.each_chunk

    async def counted(work: Any, items: list[Any], **options: Any) -> list[Any]:
        passes.append(len(items))
        return await each_chunk(work, items, **options)

    monkeypatch.setattr(replicas.io, "each_chunk", counted)
    sequenced = [encode_batch([b"s"], producer_id=7, producer_epoch=0, base_sequence=n) for n in (0, 1, 5)]
    rounds = [[(TOPIC, 0, encode_batch([bytes([n])] * (n + 1)))] for n in range(8)]
    rounds[1].append((TOPIC, 1, b"not a batch"))  # refused on its own; the others append
    outcomes = await replicas.append_rounds(rounds, acks=1)
    assert passes == [1], "one pass for every round (partition 1 is not led here: refused before it)"
    assert [(outcome.first_offset, outcome.last_offset) for outcome, *_ in outcomes] == [
        (n * (n + 1) // 2, n * (n + 1) // 2 + n)
        for n in range(8)  # round n's n + 1 records, in order
    ]
    assert isinstance(outcomes[1][1], TidelogError)
    stored = read_all(replicas.partitions[(TOPIC, 0)].log)
    assert [batch.values[0] for batch in stored] == [bytes([n]) for n in range(8)]
    # A sequence gap in one round fails that entry only; the rounds before it stand.
    gapped = await replicas.append_rounds([[(TOPIC, 0, batch)] for batch in sequenced], acks=1)
    assert [isinstance(outcome, TidelogError) for (outcome,) in gapped] == [False, False, True]
    assert gapped[2][0].code is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, gapped[2][0]


async def test_small_appends_stay_on_the_loop_unless_a_thread_holds_the_log(replicas: ReplicaManager) -> None:
    """A small append is a page-cache write done on the event loop, no thread hop (ADR 0036);
    with the log's lock held by a thread (a flush's fsync, the cleaner) it goes to the I/O threads
    and waits there, the loop serving meanwhile, and lands once the lock is let go."""
    await _apply(replicas, leader=ME, leader_epoch=1, partition_epoch=1, isr=[ME])
    hops = replicas.io.tasks
    (first,) = await replicas.append_all([(TOPIC, 0, encode_batch([b"a", b"b"]))], acks=1)
    assert isinstance(first, AppendInfo) and (first.first_offset, first.last_offset) == (0, 1)
    assert replicas.io.tasks == hops, "appended on the loop"

    partition_log = replicas.partitions[(TOPIC, 0)].log
    with held_by_a_thread(partition_log):
        appending = asyncio.ensure_future(replicas.append_all([(TOPIC, 0, encode_batch([b"c"]))], acks=1))
        await wait_until(lambda: _handed_over(replicas, hops + 1), timeout_s=10, what="the append on a thread")
        await asyncio.sleep(0.05)  # the loop turns while the append waits for the lock
        assert not appending.done()
    (second,) = await appending
    assert isinstance(second, AppendInfo) and second.first_offset == 2
    assert [batch.values for batch in read_all(partition_log)] == [[b"a", b"b"], [b"c"]]


async def test_a_read_at_or_above_the_high_watermark_is_made_on_the_loop_one_below_on_a_thread(
    replicas: ReplicaManager,
) -> None:
    """What lies at or above the high watermark was written within a replication round trip (in
    the page cache): an in-sync follower's fetch and a consumer's at the end read it on the loop;
    a consumer reading older records goes to the I/O threads (ADR 0036)."""
    await _apply(replicas, leader=ME, leader_epoch=1, partition_epoch=1, isr=[ME, OTHER])
    await replicas.append_all([(TOPIC, 0, encode_batch([b"a", b"b"]))], acks=1)  # HW 0: OTHER has not fetched
    hosted = replicas.partitions[(TOPIC, 0)]
    assert hosted.log.high_watermark == 0

    async def fetched(replica_id: int, offset: int) -> tuple[bytes, int]:
        request = broker_pb2.FetchRequest(
            replica_id=replica_id, replica_incarnation="life-2", partitions=[_fetch(offset, 1)], max_bytes=1 << 20
        )
        hops = replicas.io.tasks
        reads, _ = await full_reads(replicas, request, 1 << 20, deadline=time.monotonic(), kind="Fetch")
        return reads[0].data, replicas.io.tasks - hops

    data, hops = await fetched(OTHER, 0)  # the follower, in the ISR, at the HW: the records above it
    assert hops == 0 and decode_batch(data).values == [b"a", b"b"]
    await fetched(OTHER, 2)  # its next fetch moves the HW
    assert hosted.log.high_watermark == 2
    data, hops = await fetched(-1, 2)  # a consumer at the end: nothing yet, read here
    assert (data, hops) == (b"", 0)
    data, hops = await fetched(-1, 0)  # a consumer behind: a thread reads it
    assert hops == 1 and decode_batch(data).values == [b"a", b"b"]


def _endpoints(lives: dict[int, str]) -> list[common_pb2.BrokerEndpoint]:
    return [
        common_pb2.BrokerEndpoint(broker_id=broker, host="127.0.0.1", port=9, incarnation=life)
        for broker, life in lives.items()
    ]


def _tell_live(
    metadata: MetadataCache, live: list[common_pb2.BrokerEndpoint], shutting_down: Sequence[int] = ()
) -> None:
    """An UpdateMetadata from controller epoch 1 naming `live` as the live brokers (and
    `shutting_down` as those in controlled shutdown)."""
    metadata.update(
        broker_pb2.UpdateMetadataRequest(
            controller_epoch=1,
            controller_endpoint=metadata.controller_endpoint,
            live_brokers=live,
            shutting_down_brokers=shutting_down,
        )
    )


async def _handed_over(replicas: ReplicaManager, tasks: int) -> bool:
    return replicas.io.tasks >= tasks


async def _end_is(replicas: ReplicaManager, offset: int) -> bool:
    return replicas.partitions[(TOPIC, 0)].log.log_end_offset == offset


@contextlib.asynccontextmanager
async def _leading_with_third_caught_up(
    replicas: ReplicaManager, controller: controller_pb2_grpc.ControllerServicer
) -> AsyncIterator[tuple[IsrManager, Partition]]:
    """This broker leads with ISR {1, 2}, 5 records, broker 3 caught up and eligible to join;
    its ISR manager talks to `controller`, served in this process."""
    server = grpc.aio.server()
    controller_pb2_grpc.add_ControllerServicer_to_server(controller, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    metadata = MetadataCache()
    metadata.controller_endpoint = f"127.0.0.1:{port}"
    isr = IsrManager(replicas, metadata)
    try:
        await _apply(replicas, leader=ME, leader_epoch=1, partition_epoch=1, isr=[ME, OTHER], extra=[THIRD])
        await replicas.append(TOPIC, 0, encode_batch([b"x"] * 5), acks=1)
        replicas.followers.record_fetch(OTHER, "life-2", [_fetch(5, 1)])
        replicas.followers.record_fetch(THIRD, "life-3", [_fetch(5, 1)])
        yield isr, replicas.partitions[(TOPIC, 0)]
    finally:
        await isr.close()
        await server.stop(None)  # no grace: a handler still waiting is cancelled


class _SlowController(controller_pb2_grpc.ControllerServicer):
    """Commits every AlterPartition at once but answers only when released (a leader frozen meanwhile)."""

    def __init__(self) -> None:
        self.received = asyncio.Event()
        self.release = asyncio.Event()
        self.request: controller_pb2.AlterPartitionRequest | None = None

    async def AlterPartition(  # noqa: N802
        self, request: controller_pb2.AlterPartitionRequest, context: object
    ) -> controller_pb2.AlterPartitionResponse:
        self.request = request
        self.received.set()
        await self.release.wait()
        response = controller_pb2.AlterPartitionResponse()
        for change in request.partitions:
            state = common_pb2.PartitionState(
                topic=change.topic,
                partition=change.partition,
                leader=request.broker_id,
                isr=list(change.new_isr),
                replicas=[ME, OTHER, THIRD],
                leader_epoch=change.leader_epoch,
                partition_epoch=change.partition_epoch + 1,
                topic_id="id-1",
            )
            response.partitions.add(topic=change.topic, partition=change.partition, state=state)
        return response


async def test_the_high_watermark_waits_for_a_replica_joining_the_isr(replicas: ReplicaManager) -> None:
    # Issue 12, found by the nemesis: a leader asked to add broker 3 (caught up to the HW then);
    # the controller committed it, but the answer reached the leader only seconds later (it was
    # frozen). Meanwhile the leader advanced its HW with the old ISR {1, 2}, past what broker 3
    # held; the controller then elected broker 3 and the records a consumer had read were gone.
    # While an ISR change is in flight the HW counts both ISRs (KIP-497's maximal ISR).
    controller = _SlowController()
    async with _leading_with_third_caught_up(replicas, controller) as (isr, partition):
        assert partition.log.high_watermark == 5
        checking = asyncio.create_task(isr.check_once())
        await asyncio.wait_for(controller.received.wait(), 5)
        assert controller.request is not None and len(controller.request.partitions) == 1
        asked = controller.request.partitions[0]
        assert set(asked.new_isr) == {ME, OTHER, THIRD}
        assert dict(asked.new_isr_incarnations) == {OTHER: "life-2", THIRD: "life-3"}

        await replicas.append(TOPIC, 0, encode_batch([b"y"] * 5), acks=1)
        replicas.followers.record_fetch(OTHER, "life-2", [_fetch(10, 1)])
        assert partition.log.high_watermark == 5, "broker 3, maybe in the ISR already, has only 5"
        replicas.followers.record_fetch(THIRD, "life-3", [_fetch(10, 1)])
        assert partition.log.high_watermark == 10
        controller.release.set()
        await asyncio.wait_for(checking, 5)
        assert set(partition.state.isr) == {ME, OTHER, THIRD} and partition.state.partition_epoch == 2


async def test_an_isr_change_the_controllers_push_decided_first_is_no_longer_in_flight(
    replicas: ReplicaManager,
) -> None:
    # The controller pushes the committed state to every broker; at 10,000 partitions the push
    # often reached the leader before the AlterPartition answer, which then changed nothing (an
    # older state than ours). The change stayed "in flight" for good: the partition never left
    # the ISR check's watch and was judged every 0.5 s, a third of a leader's loop after a restart.
    controller = _SlowController()
    async with _leading_with_third_caught_up(replicas, controller) as (isr, partition):
        checking = asyncio.create_task(isr.check_once())
        await asyncio.wait_for(controller.received.wait(), 5)
        assert partition.pending_isr == (1, (ME, OTHER, THIRD))
        # The push of the committed change, first:
        await _apply(replicas, leader=ME, leader_epoch=1, partition_epoch=2, isr=[ME, OTHER, THIRD], extra=[THIRD])
        assert partition.pending_isr is None
        controller.release.set()  # the answer, for the state we hold already
        await asyncio.wait_for(checking, 5)
        assert partition.pending_isr is None and partition.state.partition_epoch == 2
        key = (TOPIC, 0)
        for replica in (OTHER, THIRD):  # both followers at the log end through live sessions
            _fetching_in_a_session(replicas, replica, 5, f"life-{replica}")
        await isr.check_once()
        assert key not in replicas.followers.isr_watch, "settled: out of the watch"


async def test_a_replica_that_catches_up_is_asked_into_the_isr_at_once_not_at_the_next_round(
    replicas: ReplicaManager,
) -> None:
    # A restarted broker caught up with thousands of partitions waited up to a whole check
    # interval on each leader before it was asked back into their ISRs; Kafka asks in the very
    # fetch that catches up. Here no whole round comes during the test: only the catch-up can ask.
    controller = _SlowController()
    controller.release.set()  # answers at once
    async with _leading_with_third_caught_up(replicas, controller) as (isr, partition):
        isr.interval_s = 3600.0
        followers = replicas.followers
        followers.caught_up.clear()
        followers.caught_up_news.clear()
        followers.record_fetch(THIRD, "life-3", [_fetch(3, 1)])
        assert not followers.caught_up and not followers.caught_up_news.is_set(), "below the HW: not caught up"
        followers.record_fetch(THIRD, "life-3", [_fetch(5, 1)])
        assert followers.caught_up == {(TOPIC, 0)} and followers.caught_up_news.is_set()
        running = asyncio.create_task(isr.run())
        try:
            await asyncio.wait_for(controller.received.wait(), 5)
            assert controller.request is not None
            assert set(controller.request.partitions[0].new_isr) == {ME, OTHER, THIRD}
            await wait_until(lambda: _isr_is(partition, {ME, OTHER, THIRD}), timeout_s=5, what="broker 3 in the ISR")
            assert not followers.caught_up, "taken by the check"
        finally:
            running.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await running


async def _isr_is(partition: Partition, isr: set[int]) -> bool:
    return set(partition.state.isr) == isr


class _RefusingJoiners(controller_pb2_grpc.ControllerServicer):
    """Refuses ISR changes as INELIGIBLE_REPLICA (a joiner gone, or in controlled shutdown), after
    leaving the first `unanswered` requests without an answer (UNAVAILABLE)."""

    def __init__(self, unanswered: int = 0) -> None:
        self.unanswered = unanswered
        self.requests: list[controller_pb2.AlterPartitionRequest] = []

    async def AlterPartition(  # noqa: N802
        self, request: controller_pb2.AlterPartitionRequest, context: grpc.aio.ServicerContext[object, object]
    ) -> controller_pb2.AlterPartitionResponse:
        self.requests.append(request)
        if len(self.requests) <= self.unanswered:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "the controller went away")
        response = controller_pb2.AlterPartitionResponse()
        for change in request.partitions:
            response.partitions.add(
                topic=change.topic,
                partition=change.partition,
                error_code=int(ErrorCode.INELIGIBLE_REPLICA),
                error_message="only live brokers not shutting down join the ISR",
            )
        return response


async def test_an_unanswered_isr_change_is_asked_again_until_settled(replicas: ReplicaManager) -> None:
    # Found by the nemesis (a partition stalled after every fault had healed): a leader asked to
    # add broker 3, got no answer, and broker 3 died before asking again. The unanswered change kept
    # counting in the HW (it may have been committed), the leader computed a fresh ISR without 3
    # and never re-sent the old one: acks=all waited forever on a dead replica. An unanswered
    # change is re-sent until an answer settles it.
    controller = _RefusingJoiners(unanswered=1)
    async with _leading_with_third_caught_up(replicas, controller) as (isr, partition):
        await isr.check_once()  # asks for {1, 2, 3}: no answer
        assert partition.pending_isr == (1, (ME, OTHER, THIRD))
        await replicas.append(TOPIC, 0, encode_batch([b"y"] * 5), acks=1)
        replicas.followers.record_fetch(OTHER, "life-2", [_fetch(10, 1)])
        assert partition.log.high_watermark == 5, "broker 3 may be in the ISR: the HW waits for it"
        partition.follower_fetched_s[THIRD] = -1e9  # broker 3 is gone: no longer wanted in the ISR
        await isr.check_once()  # the same change again, now refused: the HW needs only {1, 2}
        assert [set(request.partitions[0].new_isr) for request in controller.requests] == [{ME, OTHER, THIRD}] * 2
        assert partition.pending_isr is None
        replicas.followers.record_fetch(OTHER, "life-2", [_fetch(10, 1)])
        assert partition.log.high_watermark == 10


class _RefusingWhenReleased(_RefusingJoiners):
    def __init__(self) -> None:
        super().__init__()
        self.released = asyncio.Event()

    async def AlterPartition(  # noqa: N802
        self, request: controller_pb2.AlterPartitionRequest, context: grpc.aio.ServicerContext[object, object]
    ) -> controller_pb2.AlterPartitionResponse:
        await self.released.wait()
        return await super().AlterPartition(request, context)


async def test_a_refused_joiner_releases_the_writes_that_waited_for_it(replicas: ReplicaManager) -> None:
    # Found in a rolling restart at 10,000 partitions: a leader asked to add a broker on its way
    # out, and its acks=all writes waited for it (the maximal ISR). The refusal dropped the change
    # but did not move the high watermark, which moves on a fetch or an append: every follower was
    # at the log end and the producer waited for its one record, so it stood 5 s, until that broker
    # came back and fetched.
    controller = _RefusingWhenReleased()
    async with _leading_with_third_caught_up(replicas, controller) as (isr, partition):
        checking = asyncio.create_task(isr.check_once())  # asks for {1, 2, 3}
        await wait_until(lambda: _true(partition.pending_isr is not None), timeout_s=5, what="the change asked")
        waiting = asyncio.create_task(replicas.append(TOPIC, 0, encode_batch([b"y"]), acks=-1, timeout_s=30))
        await wait_until(lambda: _true(partition.log.log_end_offset == 6), timeout_s=5, what="the append")
        replicas.followers.record_fetch(OTHER, "life-2", [_fetch(6, 1)])
        assert partition.log.high_watermark == 5 and not waiting.done(), "broker 3 may be joining: waited for"
        controller.released.set()
        await checking
        assert partition.pending_isr is None
        info = await asyncio.wait_for(waiting, 5)
        assert info.first_offset == 5 and partition.log.high_watermark == 6


async def test_a_refusal_that_comes_once_we_follow_leaves_the_high_watermark_alone(replicas: ReplicaManager) -> None:
    # The refusal of a change asked while we led may come after a LeaderAndIsr made us a follower:
    # a follower's high watermark is the leader's to say, not one computed from the positions its
    # followers had when it led.
    controller = _RefusingWhenReleased()
    async with _leading_with_third_caught_up(replicas, controller) as (isr, partition):
        checking = asyncio.create_task(isr.check_once())  # asks for {1, 2, 3}
        await wait_until(lambda: _true(partition.pending_isr is not None), timeout_s=5, what="the change asked")
        await replicas.append(TOPIC, 0, encode_batch([b"y"] * 3), acks=1)
        replicas.followers.record_fetch(OTHER, "life-2", [_fetch(8, 1)])
        assert partition.log.high_watermark == 5, "broker 3 may be joining: waited for"
        await _apply(replicas, leader=OTHER, leader_epoch=2, partition_epoch=2, isr=[OTHER, ME], extra=[THIRD])
        controller.released.set()
        await checking
        assert partition.pending_isr is None and partition.log.high_watermark == 5


async def _true(value: bool) -> bool:
    return value


async def test_a_joiner_refused_as_ineligible_is_asked_for_again_only_in_a_new_life(replicas: ReplicaManager) -> None:
    # Stopping all brokers of a 10,000-partition cluster at once: each leader asked every ISR
    # check to add followers the controller knew to be shutting down, and logged each refusal
    # (73,880 lines from one broker in 15 s). The same request is not repeated; a new life of the
    # joiner (a restarted broker is eligible again) or a new state asks again.
    controller = _RefusingJoiners()
    async with _leading_with_third_caught_up(replicas, controller) as (isr, partition):
        await isr.check_once()
        await isr.check_once()
        assert len(controller.requests) == 1 and partition.pending_isr is None
        replicas.followers.record_fetch(THIRD, "life-4", [_fetch(5, 1)])  # broker 3 restarted
        await isr.check_once()
        assert len(controller.requests) == 2
        assert dict(controller.requests[1].partitions[0].new_isr_incarnations)[THIRD] == "life-4"
        # Found by the network fault suite: broker 3 cut off, its session expired, the cut healed;
        # it fetched again before it had registered again (refused), then registered, same life.
        await isr.check_once()
        assert len(controller.requests) == 2
        live = [
            common_pb2.BrokerEndpoint(broker_id=broker, host="127.0.0.1", port=9, incarnation=f"life-{life}")
            for broker, life in ((ME, 1), (OTHER, 2), (THIRD, 4))
        ]
        isr.metadata.update(
            broker_pb2.UpdateMetadataRequest(
                controller_epoch=1, controller_endpoint=isr.metadata.controller_endpoint, live_brokers=live
            )
        )
        await isr.check_once()
        assert len(controller.requests) == 3  # the live brokers changed: asked again
        assert partition.refused_isr is not None
        key, refused_at = partition.refused_isr
        partition.refused_isr = (key, refused_at - INELIGIBLE_RETRY_S)  # and, whatever changed, in time
        await isr.check_once()
        assert len(controller.requests) == 4


async def test_a_broker_in_controlled_shutdown_or_of_another_life_is_not_asked_into_the_isr(
    replicas: ReplicaManager,
) -> None:
    # KIP-841, found at 10,000 partitions: leaders asked to add a broker in controlled shutdown
    # (caught up, it fetched until it stopped); the high watermark then waited for it (the
    # maximal ISR) until the controller's refusal came back, and every INELIGIBLE_RETRY_S again:
    # acks=all to a partition stalled 6-11 s during a rolling restart.
    controller = _RefusingJoiners()
    async with _leading_with_third_caught_up(replicas, controller) as (isr, partition):
        live = _endpoints({broker: f"life-{broker}" for broker in (ME, OTHER, THIRD)})
        update = broker_pb2.UpdateMetadataRequest(
            controller_epoch=1,
            controller_endpoint=isr.metadata.controller_endpoint,
            live_brokers=live,
            shutting_down_brokers=[THIRD],
        )
        isr.metadata.update(update)
        await isr.check_once()
        assert not controller.requests and partition.pending_isr is None
        assert set(partition.maximal_isr()) == {ME, OTHER}  # the HW waits for no one on its way out
        # A LeaderAndIsr only adds to the list: it brings the shrinks a shutdown makes ahead of
        # the UpdateMetadata, but not the live brokers. Taking a list without a broker that had
        # just deregistered left it live and not shutting down: asked back into thousands of ISRs.
        isr.metadata.note_shutting_down(1, [])
        await isr.check_once()
        assert not controller.requests
        update.ClearField("shutting_down_brokers")
        isr.metadata.update(update)
        isr.metadata.note_shutting_down(0, [THIRD])  # (an older controller's word counts for nothing)
        await isr.check_once()
        assert len(controller.requests) == 1  # out of shutdown, in the life it fetches as: asked
        replicas.followers.record_fetch(THIRD, "life-9", [_fetch(5, 1)])  # fetching as a life not registered
        partition.refused_isr = None
        await isr.check_once()
        assert len(controller.requests) == 1


async def test_the_isr_check_lets_the_loop_go_and_asks_nothing_a_yield_made_ineligible(
    replicas: ReplicaManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    # At 10,000 partitions the check judged thousands of partitions in one piece (a broker
    # catching up is missing from them all): 0.1-0.25 s with every produce and fetch of the leader
    # waiting. It yields between slices now; a broker whose controlled shutdown begins during a
    # yield must not be asked into the ISR on what was judged before it (acks=all then waited for
    # it until the controller refused: 7-9 s in rolling restarts, when the loop first yielded).
    monkeypatch.setattr(loop_slices, "LOOP_SLICE_S", 0.0)  # a yield before every partition
    controller = _RefusingJoiners()
    async with _leading_with_third_caught_up(replicas, controller) as (isr, _):
        second = common_pb2.PartitionState(
            topic=TOPIC, partition=1, leader=ME, isr=[ME, OTHER], replicas=[ME, OTHER, THIRD],
            leader_epoch=1, partition_epoch=1, controller_epoch=1, topic_id="id-1",
        )  # fmt: skip
        push = broker_pb2.LeaderAndIsrRequest(
            controller_id=1, controller_epoch=1, partitions=[second], broker_incarnation=replicas.incarnation
        )
        assert not await replicas.states.leader_and_isr(push)
        at_start = broker_pb2.FetchPartition(topic=TOPIC, partition=1, fetch_offset=0, current_leader_epoch=1)
        replicas.followers.record_fetch(OTHER, "life-2", [at_start])
        replicas.followers.record_fetch(THIRD, "life-3", [at_start])  # broker 3 may join both ISRs
        live = _endpoints({broker: f"life-{broker}" for broker in (ME, OTHER, THIRD)})
        _tell_live(isr.metadata, live)
        judge = isr.wanted_isr
        judged: list[list[int]] = []

        def judged_then_shutdown_begins(partition: Partition, now: float) -> list[int]:
            judged.append(judge(partition, now))
            if len(judged) == 1:  # at the check's next yield, broker 3 begins its controlled shutdown
                asyncio.get_running_loop().call_soon(_tell_live, isr.metadata, live, [THIRD])
            return judged[-1]

        monkeypatch.setattr(isr, "wanted_isr", judged_then_shutdown_begins)
        await isr.check_once()
        assert judged[0] == [ME, OTHER, THIRD] and judged[1] == [ME, OTHER]  # judged before and after it
        assert not controller.requests, "the change judged before the yield is not asked"
        assert all(partition.pending_isr is None for partition in replicas.partitions.values())
        _tell_live(isr.metadata, live)  # out of shutdown: both asked, in one request
        await isr.check_once()
        assert [len(request.partitions) for request in controller.requests] == [2]


async def test_a_broker_a_leader_and_isr_says_is_gone_or_in_another_life_is_not_asked_into_the_isr(
    replicas: ReplicaManager,
) -> None:
    # Found at 10,000 partitions, a kill -9 and a start: the LeaderAndIsr taking the dead broker
    # out of every ISR is applied in slices, ahead of the UpdateMetadata saying it is gone; between
    # slices the leaders asked it back on its dead life's fetches (6,000 refusals), the maximal ISR
    # making each high watermark wait for it until the controller refused.
    controller = _RefusingJoiners()
    async with _leading_with_third_caught_up(replicas, controller) as (isr, partition):
        live = _endpoints({broker: f"life-{broker}" for broker in (ME, OTHER, THIRD)})
        _tell_live(isr.metadata, live)
        isr.metadata.note_lives(0, live[:2])  # an older controller's word counts for nothing
        assert isr.metadata.isr_eligible(THIRD, "life-3")
        isr.metadata.note_lives(1, live[:2])  # THIRD gone, as the next LeaderAndIsr says
        await isr.check_once()
        assert not controller.requests and partition.pending_isr is None
        assert set(partition.maximal_isr()) == {ME, OTHER}
        again = common_pb2.BrokerEndpoint(broker_id=THIRD, host="127.0.0.1", port=9, incarnation="life-new")
        isr.metadata.note_lives(1, [*live[:2], again])  # back in a new life: its old fetches prove nothing
        assert not isr.metadata.isr_eligible(THIRD, "life-3") and not isr.metadata.isr_eligible(THIRD, "life-new")
        await isr.check_once()
        assert not controller.requests
        # The UpdateMetadata after it says who is live, whatever the LeaderAndIsr said: here the
        # same list as before (a push whose LeaderAndIsr came alone, then a whole resync).
        _tell_live(isr.metadata, live)
        assert isr.metadata.isr_eligible(THIRD, "life-3")


async def test_a_leader_cut_off_from_etcd_leads_on_while_its_followers_fetch(tmp_path: Path) -> None:
    # ADR 0013: etcd down for everyone — the followers still fetch, so nobody was told of another
    # leader: the partition keeps serving with its session lost.
    manager = ReplicaManager(ME, tmp_path, _settings())
    try:
        await _apply(manager, leader=ME, leader_epoch=1, partition_epoch=1, isr=[ME, OTHER])
        manager.followers.record_fetch(OTHER, "life-1", [_fetch(0, 1)])
        manager.fencing.session_lost()
        assert not manager.isolated()
        info = await manager.append(TOPIC, 0, encode_batch([b"a"]), acks=1)
        assert info.first_offset == 0
        assert manager.leader_partition(TOPIC, 0) is manager.partitions[(TOPIC, 0)]
    finally:
        await manager.close()


async def test_a_leader_cut_off_whose_follower_went_quiet_leads_no_more(tmp_path: Path) -> None:
    # ... but a follower that stopped fetching was re-pointed by a controller (or died): the broker
    # leads that partition no more, its acks=all waiter ends, Metadata would be refused; the first
    # whole-state push after it registered again lifts the fence.
    clock = FakeClock()
    manager = ReplicaManager(ME, tmp_path, _settings(**{"replica.lag.time.max.ms": 200}), clock=clock)
    try:
        await _apply(manager, leader=ME, leader_epoch=1, partition_epoch=1, isr=[ME, OTHER])
        manager.followers.record_fetch(OTHER, "life-1", [_fetch(0, 1)])
        waiting = asyncio.create_task(manager.append(TOPIC, 0, encode_batch([b"a"]), acks=-1, timeout_s=30))
        await wait_until(lambda: _end_is(manager, 1), timeout_s=10, what="the leader's append")
        manager.fencing.session_lost()
        clock.advance(0.1)
        assert not manager.isolated(), "the follower fetched 100 ms ago: still ours"
        clock.advance(0.2)  # its last fetch is now 300 ms old, past replica.lag.time.max.ms
        with pytest.raises(NotLeaderOrFollowerError, match="lost its etcd session"):
            await asyncio.wait_for(waiting, 10)  # the waiter looks again at least every 0.5 s
        assert manager.isolated()
        with pytest.raises(NotLeaderOrFollowerError):
            manager.leader_partition(TOPIC, 0)
        await _apply(manager, leader=ME, leader_epoch=1, partition_epoch=1, isr=[ME, OTHER], full=True)
        assert manager.isolated(), "a push before registering again does not lift it"
        manager.fencing.registered_again()
        await _apply(manager, leader=ME, leader_epoch=1, partition_epoch=1, isr=[ME, OTHER], full=True)
        assert not manager.isolated()
        assert manager.leader_partition(TOPIC, 0) is manager.partitions[(TOPIC, 0)]
    finally:
        await manager.close()


async def test_the_flush_scheduler_looks_only_at_logs_appended_to(tmp_path: Path) -> None:
    manager = ReplicaManager(ME, tmp_path, _settings(), log_defaults={"flush.ms": "300"})
    try:
        await _apply(manager, leader=ME, leader_epoch=1, partition_epoch=1, isr=[ME])
        assert not manager._unflushed, "nothing appended: nothing to look at"
        await manager.append(TOPIC, 0, encode_batch([b"a"]), acks=1)
        partition_log = manager.partitions[(TOPIC, 0)].log
        assert partition_log.has_unflushed and manager._unflushed == {(TOPIC, 0)}

        async def flushed() -> bool:
            manager.flush_due()  # due once flush.ms (300 ms) has passed since the last flush
            return not partition_log.has_unflushed and not manager._unflushed

        await wait_until(flushed, timeout_s=10, what="the due flush")
    finally:
        await manager.close()


async def test_without_flush_ms_the_flush_scheduler_looks_at_no_log(replicas: ReplicaManager) -> None:
    """At flush.ms's default (never) time never makes a flush due: an appended log is not kept for
    the scheduler, which walked every partition once written to (35 ms of CPU a second at 10,000)."""
    await _apply(replicas, leader=ME, leader_epoch=1, partition_epoch=1, isr=[ME])
    await replicas.append(TOPIC, 0, encode_batch([b"a"]), acks=1)
    assert replicas.partitions[(TOPIC, 0)].log.has_unflushed  # (the page cache holds it: Kafka's default)
    assert not replicas._unflushed


async def test_a_delta_stops_only_the_replicas_it_names_of_the_same_topic_id(replicas: ReplicaManager) -> None:
    await _apply(replicas, leader=ME, leader_epoch=0, partition_epoch=0, isr=[ME, OTHER])
    hosted = replicas.partitions[(TOPIC, 0)]
    elsewhere = common_pb2.PartitionState(topic=TOPIC, partition=0, topic_id="id-older")
    request = broker_pb2.LeaderAndIsrRequest(
        controller_id=1, controller_epoch=1, broker_incarnation=replicas.incarnation, unassigned=[elsewhere]
    )
    assert not await replicas.states.leader_and_isr(request)
    assert replicas.partitions[(TOPIC, 0)] is hosted  # another topic of that name: not ours to stop
    request.unassigned[0].topic_id = "id-1"
    assert not await replicas.states.leader_and_isr(request)
    assert (TOPIC, 0) not in replicas.partitions
    assert (replicas.data_dir / f"{TOPIC}-0").exists()  # stopped, its log kept (as a full push does)


async def test_a_state_told_again_changes_nothing(replicas: ReplicaManager) -> None:
    await _apply(replicas, leader=ME, leader_epoch=0, partition_epoch=0, isr=[ME, OTHER])
    hosted = replicas.partitions[(TOPIC, 0)]
    hosted.follower_end[OTHER] = 0  # what the leader learnt of its follower survives a repeat
    replicas.followers.isr_watch.clear()
    await _apply(replicas, leader=ME, leader_epoch=0, partition_epoch=0, isr=[ME, OTHER], full=True)
    assert replicas.partitions[(TOPIC, 0)] is hosted and hosted.follower_end == {OTHER: 0}
    assert not replicas.followers.isr_watch  # not even looked at again


async def test_leaderships_taken_over_in_one_request_each_start_their_epoch_at_the_log_end(
    replicas: ReplicaManager,
) -> None:
    # Another broker's controlled shutdown hands this one thousands of leaderships in one
    # LeaderAndIsr: their epochs start side by side on the I/O threads, each at its own log end.
    async def push(leader: int, leader_epoch: int) -> None:
        request = broker_pb2.LeaderAndIsrRequest(
            controller_id=1,
            controller_epoch=1,
            partitions=_many_states(20, leader, leader_epoch),
            broker_incarnation=replicas.incarnation,
        )
        assert not await replicas.states.leader_and_isr(request)

    await push(ME, 1)
    for partition in range(1, 20):  # log ends 0, 1, ..., 19
        await replicas.append(TOPIC, partition, encode_batch([b"x"] * partition), acks=1)
    await push(OTHER, 2)  # deposed: followers now
    await push(ME, 3)  # every leadership back at once
    for partition in range(20):
        hosted = replicas.partitions[(TOPIC, partition)]
        assert hosted.log.leader_epochs.entries()[-1] == (3, partition)  # from its own log end
        info = await replicas.append(TOPIC, partition, encode_batch([b"y"]), acks=1)
        assert info.first_offset == partition


async def test_a_replica_a_reassignment_adds_is_recorded_from_its_session_when_the_leader_learns_of_it(
    replicas: ReplicaManager,
) -> None:
    # Issue 37's flaky reassignment: raising an empty topic's replicas, the new follower got its
    # LeaderAndIsr before the leader did. Its first fetch (in the fetch session it already had with
    # this leader) named a partition the leader did not yet list it for, so its position went
    # unrecorded; its position never changed (nothing to fetch), so no later incremental fetch
    # named the partition again, and it never joined the ISR: the reassignment sat at 0 of 2.
    only_me = common_pb2.PartitionState(
        topic=TOPIC, partition=0, leader=ME, isr=[ME], replicas=[ME], leader_epoch=1, partition_epoch=1, topic_id="id-1"
    )
    request = broker_pb2.LeaderAndIsrRequest(
        controller_id=1, controller_epoch=1, partitions=[only_me], broker_incarnation=replicas.incarnation
    )
    assert not await replicas.states.leader_and_isr(request)
    opened = broker_pb2.FetchRequest(replica_id=OTHER, incremental=True, replica_incarnation="life-2")
    session = replicas.fetch_sessions.resolve(opened)
    session.update([_fetch(0, 1)], [])
    replicas.followers.record_fetch(OTHER, "life-2", [_fetch(0, 1)], session)
    hosted = replicas.partitions[(TOPIC, 0)]
    assert OTHER not in hosted.follower_end  # not one of its replicas yet: nothing recorded
    await _apply(replicas, leader=ME, leader_epoch=1, partition_epoch=2, isr=[ME])  # replicas [ME, OTHER]
    replicas.followers.record_fetch(OTHER, "life-2", [], session)  # an incremental fetch naming nothing
    assert hosted.follower_end[OTHER] == 0  # at the log end: caught up, so the ISR check adds it
    assert OTHER in hosted.follower_caught_up_s and not session.unrecorded


async def test_a_leader_and_isr_whose_caller_is_cancelled_ends_anyway_and_leaks_no_log(
    replicas: ReplicaManager,
) -> None:
    # gRPC cancels a handler whose caller's deadline passed: a first push over thousands of new
    # partitions on a slow disk. Cut half-way, the change leaked the logs it had opened (their
    # file descriptors), and the controller's next push opened them all again.
    count = 40
    request = _whole_push(replicas, count)
    call = asyncio.ensure_future(replicas.states.leader_and_isr(request))
    for _ in range(3):
        await asyncio.sleep(0)  # under way: the logs are being opened on the I/O threads
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call

    async def all_hosted() -> bool:
        return len(replicas.partitions) == count

    await wait_until(all_hosted, timeout_s=10, what="the cancelled change carried to its end")
    descriptors = len(os.listdir("/proc/self/fd"))
    assert not await replicas.states.leader_and_isr(request)  # the controller's next, whole push
    assert len(os.listdir("/proc/self/fd")) == descriptors  # nothing opened twice
    info = await replicas.append(TOPIC, count - 1, encode_batch([b"x"]), acks=1)
    assert info.first_offset == 0


async def test_a_broker_stopping_while_a_cancelled_change_runs_closes_every_log_it_opened(tmp_path: Path) -> None:
    # The gRPC server stops first and cancels the handler; the change goes on, and the close
    # waits for it rather than closing the logs under it and missing those it opens after.
    manager = ReplicaManager(ME, tmp_path, _settings())
    descriptors = len(os.listdir("/proc/self/fd"))
    request = _whole_push(manager, 40)
    call = asyncio.ensure_future(manager.states.leader_and_isr(request))
    for _ in range(3):
        await asyncio.sleep(0)
    call.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await call
    await manager.close()
    assert len(os.listdir("/proc/self/fd")) <= descriptors  # every log opened was closed
    assert manager.clean_shutdown.take() == 40  # and named in the clean-shutdown list


async def test_thousands_of_new_logs_open_with_the_collector_off_and_are_frozen_after(
    replicas: ReplicaManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A full collection at 10,000 partitions walked millions of objects for 0.25-1 s, the event
    # loop stopped; a topic's creation ran five. The logs a big change opens are long-lived.
    monkeypatch.setattr(long_lived_heap, "LONG_LIVED_CHANGE_MIN", 8)  # (thousands in a broker)
    gc.unfreeze()
    enabled: list[bool] = []
    opening = replicas.states._open_new_logs

    async def watched(*args: Any) -> Any:
        enabled.append(gc.isenabled())
        return await opening(*args)

    monkeypatch.setattr(replicas.states, "_open_new_logs", watched)
    try:
        request = _whole_push(replicas, 8)
        assert not await replicas.states.leader_and_isr(request)
        assert enabled == [False] and gc.isenabled()
        hosted = replicas.partitions[(TOPIC, 0)]
        assert gc.get_freeze_count() > 0
        assert not any(obj is hosted for obj in gc.get_objects())  # frozen: no collection walks it
        assert not await replicas.states.leader_and_isr(request)  # told again: nothing new, nothing frozen
        assert enabled == [False, True]
        await replicas.states.stop_replicas(
            broker_pb2.StopReplicaRequest(
                controller_id=1,
                controller_epoch=1,
                broker_incarnation=replicas.incarnation,
                partitions=request.partitions,
                delete_partitions=True,
            )
        )
        assert gc.get_freeze_count() == 0  # dropped as many: the next full collection reclaims them
    finally:
        gc.unfreeze()
        gc.enable()


async def test_a_leader_and_isr_over_many_partitions_lets_other_requests_run_between_its_states(
    replicas: ReplicaManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    # At 10,000 partitions a LeaderAndIsr held the event loop for over a second, and every produce
    # and fetch of the partitions it did not touch waited that long (loop_slices.py, ADR 0032).
    monkeypatch.setattr(loop_slices, "LOOP_SLICE_S", 0.0)  # a yield at every state
    turns = 0
    applying = True

    states_begun = asyncio.Event()  # (the logs open on threads before: no turns to count then)

    async def other_requests() -> None:
        nonlocal turns
        await states_begun.wait()
        while applying:
            turns += 1
            await asyncio.sleep(0)

    seen: list[int] = []  # the other task's turns as each state is applied
    applying_one = replicas.states._apply_state

    async def watched(*args: Any) -> None:
        states_begun.set()
        seen.append(turns)
        await applying_one(*args)

    monkeypatch.setattr(replicas.states, "_apply_state", watched)
    other = asyncio.create_task(other_requests())
    try:
        assert not await replicas.states.leader_and_isr(_whole_push(replicas, 100))
    finally:
        applying = False
        await other
    assert len(seen) == 100
    assert len(set(seen)) == 100  # the other task ran between every two states (it never ran amid them before)
    assert len(replicas.partitions) == 100 and all(
        partition.state.leader == ME for partition in replicas.partitions.values()
    )


async def test_a_leader_and_isr_applies_the_partitions_written_to_lately_first(
    replicas: ReplicaManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A controlled shutdown's push moves thousands of leaderships, applied in 0.3-0.9 s on a busy
    # broker: the few partitions producers write to waited for their turn among the idle ones,
    # every acks=all acknowledgement with them.
    assert not await replicas.states.leader_and_isr(_whole_push(replicas, 100))
    await replicas.append(TOPIC, 57, encode_batch([b"x"]), acks=1)
    await replicas.append(TOPIC, 3, encode_batch([b"y"]), acks=1)
    order: list[int] = []
    applying_one = replicas.states._apply_state

    async def watched(state: common_pb2.PartitionState, *args: Any) -> None:
        order.append(state.partition)
        await applying_one(state, *args)

    monkeypatch.setattr(replicas.states, "_apply_state", watched)
    moved = broker_pb2.LeaderAndIsrRequest(
        controller_id=1,
        controller_epoch=1,
        broker_incarnation=replicas.incarnation,
        partitions=_many_states(100, OTHER, 2),
    )
    assert not await replicas.states.leader_and_isr(moved)
    assert order[:2] == [3, 57], "written to lately: first, in the controller's order"
    assert order[2:] == [partition for partition in range(100) if partition not in (3, 57)]
    assert all(partition.state.leader == OTHER for partition in replicas.partitions.values())


async def test_an_epoch_query_for_an_epoch_not_heard_of_yet_waits_for_the_state_that_brings_it(
    replicas: ReplicaManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A leadership moved: the follower's push came first and its epoch query reached the new
    # leader before the new leader's own. Refused at once, followers asked again and again
    # (thousands of partitions a round) while it applied its push.
    await _apply(replicas, leader=OTHER, leader_epoch=1, partition_epoch=1, isr=[OTHER, ME])
    query = broker_pb2.EpochQuery(topic=TOPIC, partition=0, current_leader_epoch=2, leader_epoch=1)
    waiting = asyncio.create_task(until_any_epoch_known(replicas, [query]))
    await asyncio.sleep(0.05)
    assert not waiting.done(), "epoch 2 is not heard of yet"
    await _apply(replicas, leader=ME, leader_epoch=2, partition_epoch=2, isr=[ME, OTHER])
    async with asyncio.timeout(1):
        await waiting  # as soon as the state came
    assert replicas.end_offset_for_epoch(query).error_code == 0
    known = broker_pb2.EpochQuery(topic=TOPIC, partition=0, current_leader_epoch=2, leader_epoch=2)
    unheard = broker_pb2.EpochQuery(topic=TOPIC, partition=1, current_leader_epoch=1, leader_epoch=1)
    asked = time.monotonic()
    await until_any_epoch_known(replicas, [unheard, known])  # one of them known: answered at once
    assert time.monotonic() - asked < 0.25
    monkeypatch.setattr(epoch_waits, "EPOCH_QUERY_WAIT_MAX_S", 0.1)
    never = broker_pb2.EpochQuery(topic=TOPIC, partition=0, current_leader_epoch=9, leader_epoch=2)
    async with asyncio.timeout(5):
        await until_any_epoch_known(replicas, [never])  # bounded: then refused, as before
    assert replicas.end_offset_for_epoch(never).error_code == ErrorCode.UNKNOWN_LEADER_EPOCH


def test_a_requests_entries_go_in_rounds_of_one_per_partition_each_in_its_order() -> None:
    entries = [("a", 0, "a0-1"), ("b", 0, "b0-1"), ("a", 0, "a0-2"), ("a", 1, "a1-1"), ("a", 0, "a0-3")]
    rounds = in_rounds(entries, lambda entry: entry[:2])
    assert [[name for *_, name in round_] for round_ in rounds] == [["a0-1", "b0-1", "a1-1"], ["a0-2"], ["a0-3"]]
    assert in_rounds([], lambda entry: entry) == []


async def test_a_partition_missing_a_replica_not_fetching_at_the_high_watermark_leaves_the_isr_watch_until_it_does(
    tmp_path: Path,
) -> None:
    # A broker down or restarting (a rolling restart): the thousands of partitions it was missing
    # from were judged again at every ISR check, every 0.5 s, holding the event loop 0.1-0.2 s
    # each time at 10,000 partitions. Nothing can change for them until that broker fetches at
    # the high watermark: while it catches up, each of its fetches had put them all back (30% of
    # a leader's event loop in the ISR checks during a restart at 10,000 partitions).
    clock = FakeClock()
    manager = ReplicaManager(ME, tmp_path, _settings(**{"replica.lag.time.max.ms": 1000}), clock=clock)
    isr = IsrManager(manager, MetadataCache())  # no controller: nothing is asked, only looked at
    watch, key = manager.followers.isr_watch, (TOPIC, 0)
    try:
        await _apply(manager, leader=ME, leader_epoch=1, partition_epoch=1, isr=[ME, OTHER], extra=[THIRD])
        await manager.append(TOPIC, 0, encode_batch([b"x"] * 5), acks=1)
        session = _fetching_in_a_session(manager, OTHER, 5, "life-2")
        manager.followers.record_fetch(THIRD, "life-3", [_fetch(2, 1)])  # broker 3 catching up
        assert key in watch, "broker 3's first fetch in this life: judged afresh"
        await isr.check_once()
        assert key not in watch, "fetching, but behind the high watermark: it cannot join yet"
        manager.followers.record_fetch(THIRD, "life-3", [_fetch(3, 1)])  # still behind
        manager.followers.record_fetch(THIRD, "life-3", [_fetch(4, 1)])
        assert key not in watch, "a fetch behind the high watermark puts nothing back"
        clock.advance(0.6)  # past half replica.lag.time.max.ms since broker 3's fetch
        session.fetched()  # broker 2 fetches on, at the log end
        await isr.check_once()
        assert key not in watch, "broker 3 is not fetching: nothing to look at"
        manager.followers.record_fetch(THIRD, "life-3", [_fetch(5, 1)])  # back, caught up
        assert key in watch and key in manager.followers.caught_up
        await isr.check_once({key})  # the caught-up check: it joins
        assert isr.wanted_isr(manager.partitions[key], clock()) == [ME, OTHER, THIRD]
        await isr.check_once()
        assert key in watch, "fetching at the high watermark: looked at until it joins or stops"
    finally:
        await isr.close()
        await manager.close()


async def test_a_partition_whose_outside_replica_may_not_join_leaves_the_watch_until_the_brokers_change(
    tmp_path: Path,
) -> None:
    # A broker killed had fetched moments before: for half of replica.lag.time.max.ms (15 s by
    # default) every partition it was missing from counted as "a replica fetching, it may join"
    # and was judged at every check, though the controller no longer had that life registered.
    clock = FakeClock()
    manager = ReplicaManager(ME, tmp_path, _settings(**{"replica.lag.time.max.ms": 1000}), clock=clock)
    isr = IsrManager(manager, MetadataCache())
    watch, key = manager.followers.isr_watch, (TOPIC, 0)

    def live(*brokers: int) -> None:
        isr.metadata.update(
            broker_pb2.UpdateMetadataRequest(
                controller_epoch=1,
                live_brokers=[
                    common_pb2.BrokerEndpoint(broker_id=broker, host="h", port=broker, incarnation=f"life-{broker}")
                    for broker in brokers
                ],
            )
        )

    try:
        live(ME, OTHER)  # broker 3's life is not registered (killed)
        await _apply(manager, leader=ME, leader_epoch=1, partition_epoch=1, isr=[ME, OTHER], extra=[THIRD])
        await manager.append(TOPIC, 0, encode_batch([b"x"] * 5), acks=1)
        _fetching_in_a_session(manager, OTHER, 5, "life-2")
        manager.followers.record_fetch(THIRD, "life-3", [_fetch(5, 1)])  # its last fetch, caught up
        await isr.check_once()
        assert key not in watch, "broker 3 fetched just now, but its life may not join: settled"
        assert _isr_of(manager) == [ME, OTHER]
        live(ME, OTHER, THIRD)  # the same life registered again (its session had expired)
        await isr.check_once()
        assert key in watch, "the brokers changed: judged again (a change asked for, no controller to answer)"
        assert isr.wanted_isr(manager.partitions[key], clock()) == [ME, OTHER, THIRD]
    finally:
        await isr.close()
        await manager.close()


def _isr_of(manager: ReplicaManager) -> list[int]:
    return list(manager.partitions[(TOPIC, 0)].state.isr)


async def test_a_follower_at_the_log_end_through_its_session_stays_in_the_isr_when_a_quiet_partition_is_written(
    tmp_path: Path,
) -> None:
    # A partition written once, then quiet for longer than replica.lag.time.max.ms: its follower
    # fetches on in its session (not naming it: nothing changed) and stays in the ISR. The next
    # append moves the log end past the follower until its next fetch; an ISR check in between
    # must see a follower that was caught up at its last fetch, as Kafka's lastCaughtUpTime does
    # ("fetch offset ≥ the leader's log end at the previous fetch"), not one last caught up at the
    # first write.
    clock = FakeClock()
    manager = ReplicaManager(ME, tmp_path, _settings(**{"replica.lag.time.max.ms": 1000}), clock=clock)
    isr = IsrManager(manager, MetadataCache())
    try:
        await _apply(manager, leader=ME, leader_epoch=1, partition_epoch=1, isr=[ME, OTHER])
        partition = manager.partitions[(TOPIC, 0)]
        await manager.append(TOPIC, 0, encode_batch([b"x"] * 5), acks=1)
        session = _fetching_in_a_session(manager, OTHER, 5, "life-2")
        for _ in range(10):  # 3 s of fetches at the log end, naming nothing
            clock.advance(0.3)
            session.fetched()
        assert isr.wanted_isr(partition, clock()) == [ME, OTHER]
        await manager.append(TOPIC, 0, encode_batch([b"y"]), acks=1)
        clock.advance(0.001)  # the ISR check runs before the follower's next fetch
        assert isr.wanted_isr(partition, clock()) == [ME, OTHER]
        clock.advance(1.5)  # and then it stops fetching: it leaves once the lag time has passed
        assert isr.wanted_isr(partition, clock()) == [ME]
    finally:
        await isr.close()
        await manager.close()


async def test_an_isr_change_alone_is_no_news_for_the_fetch_sessions_a_leadership_change_is(
    replicas: ReplicaManager,
) -> None:
    # A controlled shutdown shrinks 3,333 ISRs on each leader at 10,000 partitions: each was
    # marked as news in every session holding it, and the next answer to each follower carried
    # all of them (0.3 s), every acks=all produce to the leader's busy partitions waiting for it.
    await _apply(replicas, leader=ME, leader_epoch=1, partition_epoch=1, isr=[ME, OTHER], extra=[THIRD])
    await replicas.append(TOPIC, 0, encode_batch([b"x"] * 5), acks=1)
    session = _fetching_in_a_session(replicas, OTHER, 5, "life-2")
    assert replicas.partitions[(TOPIC, 0)].log.high_watermark == 5
    session.take_dirty()
    await _apply(replicas, leader=ME, leader_epoch=1, partition_epoch=2, isr=[ME], extra=[THIRD])
    assert not session.dirty and not session.woken.is_set(), "nothing a fetch answer carries changed"
    await _apply(replicas, leader=OTHER, leader_epoch=2, partition_epoch=3, isr=[OTHER, ME], extra=[THIRD])
    assert session.take_dirty() == {(TOPIC, 0)}, "the leadership moved: the follower must hear of it"


async def test_a_fetch_its_follower_cancelled_is_taken_back_and_the_same_epoch_goes_on(
    replicas: ReplicaManager,
) -> None:
    # A follower cuts its long poll short when another partition becomes ready to fetch from this
    # leader. The session moved to the next epoch as the cancelled fetch came in: kept there, the
    # follower's next fetch was refused and a full fetch of thousands of partitions followed.
    await _apply(replicas, leader=ME, leader_epoch=1, partition_epoch=1, isr=[ME, OTHER])
    await replicas.append(TOPIC, 0, encode_batch([b"x"]), acks=1)
    session = _fetching_in_a_session(replicas, OTHER, 1, "life-2")  # at the log end: nothing to read
    incremental = broker_pb2.FetchRequest(
        replica_id=OTHER, replica_incarnation="life-2", incremental=True, session_id=session.id, min_bytes=1
    )
    incremental.session_epoch = 1
    assert replicas.followers.sessions.resolve(incremental) is session and session.epoch == 2
    session.mark((TOPIC, 0))  # news the fetch takes, then finds nothing to read
    polling = asyncio.create_task(
        session_reads(replicas, incremental, session, 1 << 20, deadline=time.monotonic() + 60, kind="FetchFollower")
    )
    await until(lambda: not session.dirty)  # taken: the fetch long-polls now
    assert not polling.done()
    polling.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await polling
    assert session.epoch == 1, "the cancelled fetch's epoch is expected again"
    assert session.dirty == {(TOPIC, 0)}, "what it took is news still"
    assert replicas.followers.sessions.resolve(incremental) is session  # the old code: INVALID_FETCH_SESSION_EPOCH
    assert session.epoch == 2
    incremental.session_epoch = 0
    with pytest.raises(SessionError):
        replicas.followers.sessions.resolve(incremental)  # two behind: out of step


async def test_a_fetch_answered_as_its_follower_cut_it_short_is_answered_again_at_the_same_epoch(
    replicas: ReplicaManager,
) -> None:
    # The race the take-back cannot cover: the answer left just as the follower cancelled. The
    # records it carried must come again, or an acks=all produce waits for the next write.
    await _apply(replicas, leader=ME, leader_epoch=1, partition_epoch=1, isr=[ME, OTHER])
    session = _fetching_in_a_session(replicas, OTHER, 0, "life-2")
    await replicas.append(TOPIC, 0, encode_batch([b"x"]), acks=1)  # news for the session
    fetch = broker_pb2.FetchRequest(
        replica_id=OTHER, replica_incarnation="life-2", incremental=True, session_id=session.id, min_bytes=1
    )
    fetch.session_epoch = 1

    async def answered() -> list[tuple[int, bytes]]:
        assert replicas.followers.sessions.resolve(fetch) is session
        deadline = time.monotonic() + 5
        reads = await session_reads(replicas, fetch, session, 1 << 20, deadline=deadline, kind="FetchFollower")
        return [(read.partition, bytes(read.data)) for read in reads]

    first = await answered()
    assert len(first) == 1 and first[0][1], "the record"
    assert await answered() == first, "lost on the way: the same epoch gets the same answer again"
    assert session.epoch == 2


async def test_a_fetch_cut_short_still_waiting_here_leaves_the_news_to_the_one_sent_after_it(
    replicas: ReplicaManager,
) -> None:
    # The follower's cancellation of its long poll had not reached this leader when its next
    # fetch came: both waited on the session, and a record written then went to whichever woke
    # first. Taken by the cut one, its answer went nowhere, no later write came to mark the
    # partition again, and acks=all to it waited 30 s for the ISR to drop the follower.
    await _apply(replicas, leader=ME, leader_epoch=1, partition_epoch=1, isr=[ME, OTHER])
    session = _fetching_in_a_session(replicas, OTHER, 0, "life-2")
    fetch = broker_pb2.FetchRequest(
        replica_id=OTHER, replica_incarnation="life-2", incremental=True, session_id=session.id, min_bytes=1
    )
    fetch.session_epoch = 1

    def poll() -> asyncio.Task[list[Any]]:
        assert replicas.followers.sessions.resolve(fetch) is session
        deadline = time.monotonic() + 30
        return asyncio.create_task(
            session_reads(replicas, fetch, session, 1 << 20, deadline=deadline, kind="FetchFollower")
        )

    cut_short = poll()
    await asyncio.sleep(0)  # in its long poll
    sent_after = poll()  # the same epoch: the one before it never answered, as far as its follower knows
    await asyncio.sleep(0)
    await replicas.append(TOPIC, 0, encode_batch([b"x"]), acks=1)
    async with asyncio.timeout(5):
        reads = await sent_after
        assert [(read.partition, bool(read.data)) for read in reads] == [(0, True)]
        assert await cut_short == [], "superseded: it answers nothing"
    assert session.epoch == 2


async def test_a_partition_written_on_in_sync_is_judged_once_a_lag_time_not_at_every_check(tmp_path: Path) -> None:
    # Under a produce to every one of 10,000 partitions the ISR check judged them all every 0.5 s,
    # a quarter of a leader's event-loop time. With every replica in sync, no ISR change can come
    # before a member has lagged replica.lag.time.max.ms from its last catch-up.
    clock = FakeClock()
    manager = ReplicaManager(ME, tmp_path, _settings(**{"replica.lag.time.max.ms": 1000}), clock=clock)
    isr = IsrManager(manager, MetadataCache())
    watch, key = manager.followers.isr_watch, (TOPIC, 0)
    try:
        await _apply(manager, leader=ME, leader_epoch=1, partition_epoch=1, isr=[ME, OTHER])
        partition = manager.partitions[(TOPIC, 0)]
        session = _fetching_in_a_session(manager, OTHER, 0, "life-2")
        await manager.append(TOPIC, 0, encode_batch([b"x"]), acks=1)  # the follower behind: not settled
        await isr.check_once()
        assert key not in watch, "in sync, caught up just now: nothing can change for a lag time"
        for offset in range(2, 5):  # written on, the follower keeping up: not judged meanwhile
            clock.advance(0.2)
            await manager.append(TOPIC, 0, encode_batch([b"x"]), acks=1)
            assert key not in watch
            manager.followers.record_fetch(OTHER, "life-2", [_fetch(offset, 1)], session)
            session.fetched()
        clock.advance(0.5)  # 1.1 s since the first catch-up: judged again, and deferred again
        await isr.check_once()
        assert key not in watch and partition.state.isr == [ME, OTHER]
        clock.advance(1.1)  # the follower stopped fetching: it leaves a lag time after its last catch-up
        assert isr.wanted_isr(partition, clock()) == [ME]
        await isr.check_once()
        assert partition.pending_isr is not None or key in watch, "judged, and its change asked for"
        # A follower's new life is judged at its first fetch, deferred or not.
        manager.followers.defer(key, clock() + 100)
        manager.followers.record_fetch(OTHER, "life-3", [_fetch(4, 1)], session)
        assert key in watch
    finally:
        await isr.close()
        await manager.close()
