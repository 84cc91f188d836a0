"""The transaction coordinator in-process: its records go to a list, its markers to a recorder
(cluster tests use real logs and brokers)."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
from collections.abc import Iterable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fake_clock import FakeClock
from tests.waiting import until
from tidelog.common.errors import ErrorCode, TidelogError
from tidelog.common.settings import CoordinatorSettings
from tidelog.coordinator.txn_coordinator import TxnCoordinator
from tidelog.coordinator.txn_marker_writer import TxnMarkersFencedError
from tidelog.coordinator.txn_records import decode_txn_key, decode_txn_value, txn_key, txn_value
from tidelog.coordinator.txn_state import EPOCH_MAX, IllegalTransitionError, TxnMetadata, TxnState

TXN = "tx-1"


class RecordingWriter:
    def __init__(self) -> None:
        self.records: list[tuple[int, bytes, bytes | None]] = []
        self.appends: list[list[TxnState | None]] = []  # the states of each append, one replicated write each

    async def append(self, partition: int, records: list[tuple[bytes, bytes | None]]) -> None:
        self.records.extend((partition, key, value) for key, value in records)
        self.appends.append([None if value is None else decode_txn_value(TXN, value).state for _, value in records])

    def states(self) -> list[TxnState | None]:
        return [None if value is None else decode_txn_value(TXN, value).state for _, _, value in self.records]


@dataclasses.dataclass
class Written:
    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int
    partitions: frozenset[tuple[str, int]]


class RecordingMarkers:
    def __init__(self) -> None:
        self.written: list[Written] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.fenced = False

    async def write(
        self,
        producer_id: int,
        producer_epoch: int,
        *,
        commit: bool,
        coordinator_epoch: int,
        partitions: Iterable[tuple[str, int]],
    ) -> None:
        await self.gate.wait()
        if self.fenced:
            raise TxnMarkersFencedError(ErrorCode.TRANSACTION_COORDINATOR_FENCED, "newer coordinator")
        self.written.append(Written(producer_id, producer_epoch, commit, coordinator_epoch, frozenset(partitions)))


class Fixture:
    def __init__(self, **configs: object) -> None:
        self.writer = RecordingWriter()
        self.markers = RecordingMarkers()
        self.clock = FakeClock(1_700_000_000.0)
        ids = itertools.count(1000)

        async def new_producer_id() -> int:
            return next(ids)

        settings = CoordinatorSettings.from_configs({"transaction.state.log.num.partitions": 1, **configs})
        self.coordinator = TxnCoordinator(
            self.writer,
            self.markers,
            settings,
            new_producer_id=new_producer_id,
            clock_ms=self.clock.millis,
            monotonic=self.clock,
        )
        self.coordinator.settle_wait_s = 0.05  # (tests that hold the markers back wait no longer)
        self.coordinator.begin_loading(0, epoch=7)
        self.coordinator.finish_loading(0)

    @property
    def current(self) -> TxnMetadata:
        return self.coordinator.transactions[0][TXN]

    async def completed(self) -> None:
        """Every change and marker phase under way has ended (background aborts included)."""
        await self.coordinator.writes.finish()
        await until(lambda: not self.coordinator.completions and TXN not in self.coordinator.pending)


async def _error(work: object) -> ErrorCode:
    with pytest.raises(TidelogError) as raised:
        await work  # type: ignore[misc]
    return raised.value.code


def test_the_transition_table_refuses_illegal_moves() -> None:
    metadata = TxnMetadata(TXN, 1, 0, 60_000, TxnState.COMPLETE_COMMIT, frozenset(), -1, 0)
    with pytest.raises(IllegalTransitionError):
        metadata.prepare_complete(1)  # CompleteCommit → CompleteCommit
    prepared = dataclasses.replace(metadata, state=TxnState.ONGOING).prepare_end(True, 1)
    with pytest.raises(IllegalTransitionError):
        prepared.prepare_add_partitions(frozenset({("t", 0)}), 2)  # PrepareCommit → Ongoing
    with pytest.raises(IllegalTransitionError):
        prepared.prepare_fence()
    with pytest.raises(IllegalTransitionError):
        dataclasses.replace(metadata, state=TxnState.DEAD).prepare_new_epoch(1, 1000, None)


@given(
    producer_id=st.integers(0, 2**62),
    epoch=st.integers(0, EPOCH_MAX),
    state=st.sampled_from(list(TxnState)),
    partitions=st.frozensets(st.tuples(st.sampled_from(["a", "topic-b", "ü"]), st.integers(0, 2**31 - 1)), max_size=8),
    times=st.tuples(st.integers(-1, 2**62), st.integers(0, 2**62)),
    tail=st.tuples(st.integers(-1, EPOCH_MAX), st.integers(-1, 2**62)),
)
def test_records_round_trip_in_kafkas_layout(  # noqa: PLR0917
    producer_id: int,
    epoch: int,
    state: TxnState,
    partitions: frozenset[tuple[str, int]],
    times: tuple[int, int],
    tail: tuple[int, int],
) -> None:
    metadata = TxnMetadata(TXN, producer_id, epoch, 60_000, state, partitions, times[0], times[1], *tail)
    assert decode_txn_value(decode_txn_key(txn_key(TXN)), txn_value(metadata)) == metadata
    assert txn_key(TXN) == b"\x00\x00\x00\x04tx-1"  # int16 version 0, int16 length, the id
    assert txn_value(metadata)[:2] == b"\x00\x00" and txn_value(metadata)[16] == state.code


async def test_a_committed_transaction_writes_prepare_then_markers_then_complete() -> None:
    fixture = Fixture()
    producer_id, epoch = await fixture.coordinator.init_producer_id(TXN, 60_000)
    assert epoch == 0
    await fixture.coordinator.add_partitions(TXN, producer_id, epoch, [("t", 0), ("t", 1)])
    await fixture.coordinator.add_partitions(TXN, producer_id, epoch, [("t", 1)])  # already in: nothing written
    answer = await fixture.coordinator.end_transaction(TXN, producer_id, epoch, commit=True)
    assert answer == (producer_id, 1)  # the epoch bumped by the end (KIP-890)
    await fixture.completed()
    assert fixture.markers.written == [Written(producer_id, 1, True, 7, frozenset({("t", 0), ("t", 1)}))]
    assert fixture.writer.states() == [
        TxnState.EMPTY,
        TxnState.ONGOING,
        TxnState.PREPARE_COMMIT,
        TxnState.COMPLETE_COMMIT,
    ]
    assert fixture.current.state == TxnState.COMPLETE_COMMIT and not fixture.current.partitions
    # A retry of the same EndTxn (its answer lost) gets the same answer, not a fence.
    assert await fixture.coordinator.end_transaction(TXN, producer_id, epoch, commit=True) == (producer_id, 1)
    assert (
        await _error(fixture.coordinator.end_transaction(TXN, producer_id, epoch, commit=False))
        == ErrorCode.PRODUCER_FENCED
    )
    # The next transaction, in the bumped epoch.
    await fixture.coordinator.add_partitions(TXN, producer_id, 1, [("t", 2)])
    assert fixture.current.state == TxnState.ONGOING and fixture.current.partitions == {("t", 2)}


async def test_a_client_before_kip_890_keeps_its_epoch_through_transactions_and_retries() -> None:
    """Kafka's EndTxn v0-4 (librdkafka, kafka-python through the Kafka listener): no bump."""
    fixture = Fixture()
    producer_id, epoch = await fixture.coordinator.init_producer_id(TXN, 60_000)
    for commit in (True, False):
        await fixture.coordinator.add_partitions(TXN, producer_id, epoch, [("t", 0)])
        answer = await fixture.coordinator.end_transaction(TXN, producer_id, epoch, commit=commit, keep_epoch=True)
        assert answer == (producer_id, epoch)
        await fixture.completed()
        # A retry of the same end is answered, not fenced.
        again = await fixture.coordinator.end_transaction(TXN, producer_id, epoch, commit=commit, keep_epoch=True)
        assert again == (producer_id, epoch)
    assert [(w.producer_epoch, w.commit) for w in fixture.markers.written] == [(epoch, True), (epoch, False)]
    assert fixture.current.producer_epoch == epoch


async def test_a_new_instance_fences_the_old_one_and_aborts_its_open_transaction() -> None:
    fixture = Fixture()
    producer_id, epoch = await fixture.coordinator.init_producer_id(TXN, 60_000)
    await fixture.coordinator.add_partitions(TXN, producer_id, epoch, [("t", 0)])
    assert await _error(fixture.coordinator.init_producer_id(TXN, 60_000)) == ErrorCode.CONCURRENT_TRANSACTIONS
    await fixture.completed()
    assert fixture.markers.written == [Written(producer_id, 1, False, 7, frozenset({("t", 0)}))]
    assert await fixture.coordinator.init_producer_id(TXN, 60_000) == (producer_id, 2)
    for call in (
        fixture.coordinator.add_partitions(TXN, producer_id, epoch, [("t", 1)]),
        fixture.coordinator.end_transaction(TXN, producer_id, epoch, commit=True),
    ):
        assert await _error(call) == ErrorCode.PRODUCER_FENCED


async def test_requests_meeting_a_change_in_flight_are_told_to_retry() -> None:
    fixture = Fixture()
    producer_id, epoch = await fixture.coordinator.init_producer_id(TXN, 60_000)
    await fixture.coordinator.add_partitions(TXN, producer_id, epoch, [("t", 0)])
    fixture.markers.gate.clear()
    _, bumped = await fixture.coordinator.end_transaction(TXN, producer_id, epoch, commit=True)
    for call in (
        fixture.coordinator.add_partitions(TXN, producer_id, bumped, [("t", 1)]),
        fixture.coordinator.init_producer_id(TXN, 60_000),
        fixture.coordinator.end_transaction(TXN, producer_id, bumped, commit=False),
    ):
        assert await _error(call) == ErrorCode.CONCURRENT_TRANSACTIONS
    fixture.markers.gate.set()
    await fixture.completed()
    await fixture.coordinator.add_partitions(TXN, producer_id, bumped, [("t", 1)])


async def test_the_wrong_id_epoch_or_state_is_refused_with_kafkas_errors() -> None:
    fixture = Fixture()
    assert (
        await _error(fixture.coordinator.add_partitions(TXN, 1, 0, [("t", 0)])) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    )
    assert await _error(fixture.coordinator.init_producer_id(TXN, 900_001)) == ErrorCode.INVALID_TRANSACTION_TIMEOUT
    assert await _error(fixture.coordinator.init_producer_id("", 1000)) == ErrorCode.INVALID_REQUEST
    producer_id, epoch = await fixture.coordinator.init_producer_id(TXN, 60_000)
    assert (
        await _error(fixture.coordinator.add_partitions(TXN, producer_id + 1, epoch, []))
        == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    )
    assert (
        await _error(fixture.coordinator.add_partitions(TXN, producer_id, epoch + 1, []))
        == ErrorCode.INVALID_PRODUCER_EPOCH
    )
    assert (
        await _error(fixture.coordinator.end_transaction(TXN, producer_id, epoch, commit=True))
        == ErrorCode.INVALID_TXN_STATE
    )
    with pytest.raises(TidelogError) as raised:
        fixture.coordinator.verify(TXN, producer_id, epoch, ("t", 0))
    assert raised.value.code == ErrorCode.INVALID_TXN_STATE
    await fixture.coordinator.add_partitions(TXN, producer_id, epoch, [("t", 0)])
    fixture.coordinator.verify(TXN, producer_id, epoch, ("t", 0))
    with pytest.raises(TidelogError):
        fixture.coordinator.verify(TXN, producer_id, epoch, ("t", 1))
    # Aborting an empty transaction is allowed (it bumps the epoch, as Kafka's TV2).
    await fixture.coordinator.end_transaction(TXN, producer_id, epoch, commit=False)
    await fixture.completed()
    assert await fixture.coordinator.end_transaction(TXN, producer_id, epoch + 1, commit=False) == (
        producer_id,
        epoch + 2,
    )


async def test_a_transaction_past_its_timeout_is_aborted_and_its_producer_fenced() -> None:
    fixture = Fixture(**{"transaction.abort.timed.out.transaction.cleanup.interval.ms": 1000})
    producer_id, epoch = await fixture.coordinator.init_producer_id(TXN, 5_000)
    await fixture.coordinator.add_partitions(TXN, producer_id, epoch, [("t", 0)])
    fixture.clock.advance(4)
    await fixture.coordinator.tick()
    assert fixture.current.state == TxnState.ONGOING
    fixture.clock.advance(2)
    await fixture.coordinator.tick()
    await fixture.completed()
    assert fixture.current.state == TxnState.COMPLETE_ABORT
    assert fixture.markers.written[-1].commit is False
    assert (
        await _error(fixture.coordinator.end_transaction(TXN, producer_id, epoch, commit=True))
        == ErrorCode.PRODUCER_FENCED
    )


async def test_an_idle_transactional_id_expires() -> None:
    fixture = Fixture(**{"transactional.id.expiration.ms": 60_000})
    await fixture.coordinator.init_producer_id(TXN, 5_000)
    fixture.clock.advance(61)
    await fixture.coordinator.tick()
    assert TXN not in fixture.coordinator.transactions[0]
    assert fixture.writer.records[-1][2] is None  # a tombstone


async def test_the_last_epoch_ends_with_a_new_producer_id() -> None:
    fixture = Fixture()
    producer_id, _ = await fixture.coordinator.init_producer_id(TXN, 60_000)
    worn = dataclasses.replace(
        fixture.current, producer_epoch=EPOCH_MAX - 1, state=TxnState.ONGOING, partitions=frozenset({("t", 0)})
    )
    fixture.coordinator.transactions[0][TXN] = worn
    new_id, new_epoch = await fixture.coordinator.end_transaction(TXN, producer_id, EPOCH_MAX - 1, commit=True)
    assert new_id != producer_id and new_epoch == 0
    await fixture.completed()
    assert (
        fixture.markers.written[-1].producer_id == producer_id
        and fixture.markers.written[-1].producer_epoch == EPOCH_MAX
    )
    assert (fixture.current.producer_id, fixture.current.producer_epoch) == (new_id, 0)
    await fixture.coordinator.add_partitions(TXN, new_id, 0, [("t", 0)])


async def test_a_new_owner_replays_the_log_and_finishes_what_was_prepared() -> None:
    fixture = Fixture()
    producer_id, epoch = await fixture.coordinator.init_producer_id(TXN, 60_000)
    await fixture.coordinator.add_partitions(TXN, producer_id, epoch, [("t", 0)])
    fixture.markers.gate.clear()
    await fixture.coordinator.end_transaction(TXN, producer_id, epoch, commit=False)
    fixture.coordinator.unload(0)  # the owner goes with the markers unwritten
    successor = Fixture()
    successor.coordinator.unload(0)
    successor.coordinator.begin_loading(0, epoch=8)
    for partition, key, value in fixture.writer.records:
        successor.coordinator.replay(partition, key, value)
    successor.coordinator.finish_loading(0)
    await successor.completed()
    assert successor.markers.written == [Written(producer_id, 1, False, 8, frozenset({("t", 0)}))]
    assert successor.current.state == TxnState.COMPLETE_ABORT
    assert not fixture.markers.written


async def test_a_fenced_marker_stops_the_completion() -> None:
    fixture = Fixture()
    producer_id, epoch = await fixture.coordinator.init_producer_id(TXN, 60_000)
    await fixture.coordinator.add_partitions(TXN, producer_id, epoch, [("t", 0)])
    fixture.markers.fenced = True
    await fixture.coordinator.end_transaction(TXN, producer_id, epoch, commit=True)
    await fixture.completed()
    assert fixture.current.state == TxnState.PREPARE_COMMIT  # left for the partition's next owner


async def _committing_with_markers_held() -> tuple[Fixture, int, int, int]:
    """A transaction committed whose markers are held back: the fixture, the producer id, the
    transaction's epoch and the epoch the commit bumped it to."""
    fixture = Fixture()
    fixture.coordinator.settle_wait_s = 10
    producer_id, epoch = await fixture.coordinator.init_producer_id(TXN, 60_000)
    await fixture.coordinator.add_partitions(TXN, producer_id, epoch, [("t", 0)])
    fixture.markers.gate.clear()
    _, bumped = await fixture.coordinator.end_transaction(TXN, producer_id, epoch, commit=True)
    return fixture, producer_id, epoch, bumped


async def test_the_next_transaction_waits_for_the_last_ones_end_rather_than_being_told_to_retry() -> None:
    fixture, producer_id, _, bumped = await _committing_with_markers_held()
    added = asyncio.create_task(fixture.coordinator.add_partitions(TXN, producer_id, bumped, [("t", 1)]))
    await until(lambda: TXN in fixture.coordinator.joining)
    assert not added.done()  # waiting for the markers, not refused
    fixture.markers.gate.set()
    await added
    assert fixture.current.state == TxnState.ONGOING and fixture.current.partitions == {("t", 1)}
    # The completion and the next transaction's partitions went in one append: one replicated write.
    assert fixture.writer.appends[-1] == [TxnState.COMPLETE_COMMIT, TxnState.ONGOING]
    replayed = Fixture()
    replayed.coordinator.begin_loading(0, epoch=8)
    for _, key, value in fixture.writer.records:
        replayed.coordinator.replay(0, key, value)
    replayed.coordinator.finish_loading(0)
    assert replayed.current == fixture.current


async def test_a_fenced_request_waiting_for_the_last_end_gets_its_error_and_the_completion_goes_alone() -> None:
    fixture, producer_id, epoch, _ = await _committing_with_markers_held()
    stale = asyncio.create_task(fixture.coordinator.add_partitions(TXN, producer_id, epoch, [("t", 1)]))
    await until(lambda: TXN in fixture.coordinator.joining)
    fixture.markers.gate.set()
    assert await _error(stale) == ErrorCode.PRODUCER_FENCED
    await fixture.completed()
    assert fixture.writer.appends[-1] == [TxnState.COMPLETE_COMMIT]
    assert fixture.current.state == TxnState.COMPLETE_COMMIT
