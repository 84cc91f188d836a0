"""Transactions in a partition log (KIP-98): markers, the last stable offset, the aborted-transaction
index, and what survives a restart, a crash and a truncation."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tidelog.broker.storage import LogConfig, PartitionLog
from tidelog.broker.storage.log_cleaner import compact
from tidelog.broker.storage.transaction_index import TXN_INDEX_SUFFIX, AbortedTxn
from tidelog.common.errors import (
    ConcurrentTransactionsError,
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)
from tidelog.common.record.batch import encode_batch, read_header
from tidelog.common.record.control import ControlType, Marker, decode_marker, encode_marker

from .conftest import OpenLog, read_all

COMMIT = Marker(ControlType.COMMIT, coordinator_epoch=0)
ABORT = Marker(ControlType.ABORT, coordinator_epoch=0)


def transactional(count: int, sequence: int, *, producer_id: int = 7, epoch: int = 0) -> bytes:
    return encode_batch(
        [b"p%d-%d" % (producer_id, sequence + index) for index in range(count)],
        timestamps=1000,
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=sequence,
        transactional=True,
    )


def plain(count: int = 1) -> bytes:
    return encode_batch([b"plain"] * count, timestamps=1000)


def replicated(partition_log: PartitionLog) -> None:
    """The followers caught up: the high watermark is the log end."""
    partition_log.update_high_watermark(partition_log.log_end_offset)


def test_a_marker_is_a_control_batch_holding_kafkas_bytes() -> None:
    batch = encode_marker(5, 3, Marker(ControlType.ABORT, 9), timestamp=1)
    header = read_header(batch)
    assert header.is_control and header.is_transactional
    assert (header.producer_id, header.producer_epoch, header.record_count) == (5, 3, 1)
    assert decode_marker(batch) == Marker(ControlType.ABORT, 9)
    with pytest.raises(Exception, match="not a one-record control batch"):
        decode_marker(plain())


def test_an_open_transaction_holds_the_last_stable_offset_until_its_commit_is_replicated(open_log: OpenLog) -> None:
    partition_log = open_log()
    partition_log.append_as_leader(plain(2), leader_epoch=0)  # 0-1
    partition_log.append_as_leader(transactional(3, 0), leader_epoch=0)  # 2-4
    partition_log.append_as_leader(plain(1), leader_epoch=0)  # 5
    replicated(partition_log)
    assert (partition_log.high_watermark, partition_log.last_stable_offset) == (6, 2)
    commit = partition_log.append_marker(7, 0, COMMIT, leader_epoch=0)
    assert commit.first_offset == 6
    assert partition_log.last_stable_offset == 2  # until the high watermark passes the marker
    replicated(partition_log)
    assert partition_log.last_stable_offset == 7
    assert partition_log.aborted_transactions(0, 7) == []


def test_an_abort_goes_into_its_markers_segment_index_and_overlapping_reads_find_it(open_log: OpenLog) -> None:
    partition_log = open_log()
    partition_log.append_as_leader(transactional(2, 0, producer_id=1), leader_epoch=0)  # 0-1
    partition_log.append_as_leader(transactional(2, 0, producer_id=2), leader_epoch=0)  # 2-3
    partition_log.roll()
    partition_log.append_as_leader(transactional(1, 2, producer_id=1), leader_epoch=0)  # 4
    partition_log.append_marker(1, 0, ABORT, leader_epoch=0)  # 5: producer 1 aborts 0..5
    assert partition_log.last_stable_offset <= 2  # producer 2 is still open (and nothing is replicated)
    partition_log.append_marker(2, 0, COMMIT, leader_epoch=0)  # 6
    replicated(partition_log)
    assert partition_log.last_stable_offset == 7
    aborted = AbortedTxn(producer_id=1, first_offset=0, last_offset=5, last_stable_offset=2)
    assert partition_log.aborted_transactions(0, 7) == [aborted]
    assert partition_log.aborted_transactions(3, 4) == [aborted]  # read from the first segment only
    assert partition_log.aborted_transactions(6, 7) == []
    active = partition_log.segments()[-1]
    assert active.txn_index.path.name == f"{active.base_offset:020d}{TXN_INDEX_SUFFIX}"
    assert active.txn_index.path.exists() and not list(partition_log.directory.glob(f"{0:020d}{TXN_INDEX_SUFFIX}"))


def test_only_a_coordinators_transactional_offsets_may_go_without_a_sequence(open_log: OpenLog) -> None:
    partition_log = open_log()
    unsequenced = encode_batch([b"offsets"], keys=[b"k"], producer_id=7, producer_epoch=0, transactional=True)
    with pytest.raises(OutOfOrderSequenceError, match="without a sequence"):
        partition_log.append_as_leader(unsequenced, leader_epoch=0)
    with pytest.raises(OutOfOrderSequenceError, match="without a sequence"):  # not transactional: never
        partition_log.append_as_leader(
            encode_batch([b"x"], producer_id=8, producer_epoch=0), leader_epoch=0, unsequenced=True
        )
    partition_log.append_as_leader(unsequenced, leader_epoch=0, unsequenced=True)
    partition_log.append_as_leader(unsequenced, leader_epoch=0, unsequenced=True)  # no dedupe without sequences
    assert partition_log.producer_state.ongoing == {7: 0}
    partition_log.append_marker(7, 1, COMMIT, leader_epoch=0)
    assert partition_log.producer_state.ongoing == {}


def test_the_rules_a_transactional_producer_is_held_to(open_log: OpenLog) -> None:
    partition_log = open_log()
    partition_log.append_as_leader(transactional(2, 0), leader_epoch=0)
    idempotent = encode_batch([b"x"], producer_id=7, producer_epoch=0, base_sequence=2)
    with pytest.raises(InvalidTxnStateError):
        partition_log.append_as_leader(idempotent, leader_epoch=0)
    with pytest.raises(ConcurrentTransactionsError):  # the coordinator fenced epoch 0; its abort is not here yet
        partition_log.append_as_leader(transactional(1, 0, epoch=1), leader_epoch=0)
    with pytest.raises(InvalidRecordError, match="control batches"):
        partition_log.append_as_leader(encode_marker(7, 0, COMMIT, timestamp=1), leader_epoch=0)
    partition_log.append_marker(7, 1, Marker(ControlType.ABORT, coordinator_epoch=4), leader_epoch=0)
    with pytest.raises(InvalidProducerEpochError):
        partition_log.append_marker(7, 0, Marker(ControlType.ABORT, coordinator_epoch=4), leader_epoch=0)
    with pytest.raises(TransactionCoordinatorFencedError):
        partition_log.append_marker(7, 1, Marker(ControlType.ABORT, coordinator_epoch=3), leader_epoch=0)
    with pytest.raises(OutOfOrderSequenceError, match="after a transaction marker"):
        partition_log.append_as_leader(transactional(1, 2, epoch=1), leader_epoch=0)
    partition_log.append_as_leader(transactional(1, 0, epoch=1), leader_epoch=0)  # the next transaction
    assert partition_log.log_end_offset == 4
    assert partition_log.producer_state.ongoing == {7: 3}


def test_open_transactions_survive_a_clean_restart_and_a_crash(open_log: OpenLog) -> None:
    partition_log = open_log()
    partition_log.append_as_leader(transactional(1, 0, producer_id=1), leader_epoch=0)  # 0, stays open
    for sequence in range(10):  # rolls segments: snapshots are taken with producer 1 open
        partition_log.append_as_leader(transactional(1, sequence, producer_id=2), leader_epoch=0)
        partition_log.roll()
    partition_log.append_marker(2, 0, ABORT, leader_epoch=0)  # 11
    replicated(partition_log)
    expected = (partition_log.last_stable_offset, partition_log.aborted_transactions(0, 12))
    assert expected == (0, [AbortedTxn(2, 1, 11, 0)])
    partition_log.close()
    reopened = open_log()
    assert (reopened.last_stable_offset, reopened.aborted_transactions(0, 12)) == expected
    reopened.flush()
    reopened.close_without_flush()
    for index in reopened.directory.glob(f"*{TXN_INDEX_SUFFIX}"):  # lost with the crash: replay rebuilds it
        index.unlink()
    for snapshot in sorted(reopened.directory.glob("*.snapshot"))[-1:]:
        snapshot.unlink()
    crashed = open_log()
    assert (crashed.last_stable_offset, crashed.aborted_transactions(0, 12)) == expected
    crashed.append_marker(1, 0, COMMIT, leader_epoch=0)
    replicated(crashed)
    assert crashed.last_stable_offset == crashed.log_end_offset


def test_truncating_a_marker_away_reopens_its_transaction(open_log: OpenLog) -> None:
    partition_log = open_log()
    partition_log.append_as_leader(transactional(2, 0), leader_epoch=0)  # 0-1
    partition_log.append_marker(7, 0, ABORT, leader_epoch=0)  # 2
    partition_log.update_high_watermark(2)
    assert partition_log.aborted_transactions(0, 3) == [AbortedTxn(7, 0, 2, 3)]
    partition_log.truncate_to(2)
    assert partition_log.aborted_transactions(0, 3) == []
    assert partition_log.producer_state.ongoing == {7: 0}
    assert partition_log.last_stable_offset == 0


def test_the_last_stable_offset_never_falls_below_the_log_start(open_log: OpenLog) -> None:
    partition_log = open_log()
    partition_log.append_as_leader(transactional(1, 0), leader_epoch=0)  # 0: stays open
    partition_log.append_as_leader(plain(3), leader_epoch=0)  # 1-3
    replicated(partition_log)
    assert partition_log.last_stable_offset == 0
    partition_log.delete_records(2)  # the open transaction's first record is gone
    assert partition_log.last_stable_offset == 2


def test_an_open_transaction_keeps_its_producer_from_expiring(open_log: OpenLog) -> None:
    partition_log = open_log()
    partition_log.append_as_leader(transactional(1, 0, producer_id=1), leader_epoch=0)
    idempotent = encode_batch([b"x"], timestamps=1000, producer_id=2, producer_epoch=0, base_sequence=0)
    partition_log.append_as_leader(idempotent, leader_epoch=0)
    assert partition_log.expire_producers(expiration_ms=0) == 1
    assert set(partition_log.producer_state.producers) == {1}


def test_compaction_stops_at_the_last_stable_offset(open_log: OpenLog) -> None:
    partition_log = open_log(cleanup_policy="compact")
    partition_log.append_as_leader(encode_batch([b"old"], keys=[b"k"], timestamps=1000), leader_epoch=0)  # 0
    open_transaction = encode_batch(
        [b"open"], keys=[b"t"], timestamps=1000, producer_id=7, producer_epoch=0, base_sequence=0, transactional=True
    )
    partition_log.append_as_leader(open_transaction, leader_epoch=0)  # 1
    for _ in range(3):
        partition_log.roll()
        partition_log.append_as_leader(encode_batch([b"new"], keys=[b"k"], timestamps=1000), leader_epoch=0)
    replicated(partition_log)
    assert partition_log.last_stable_offset == 1
    assert compact(partition_log) is None  # every old segment reaches past the open transaction
    partition_log.append_marker(7, 0, COMMIT, leader_epoch=0)
    partition_log.roll()
    replicated(partition_log)
    result = compact(partition_log)
    assert result is not None and result.records_removed >= 1
    assert 0 not in [batch.header.base_offset for batch in read_all(partition_log)]


def test_compaction_removes_aborted_transactions_and_never_lets_them_supersede(open_log: OpenLog) -> None:
    """An aborted offset commit (a transactional record for the same key) must not delete the
    committed value before it: Kafka's cleaner ignores aborted records when it builds its map."""
    partition_log = open_log(cleanup_policy="compact")
    partition_log.append_as_leader(encode_batch([b"committed"], keys=[b"k"], timestamps=1000), leader_epoch=0)
    aborted = encode_batch(
        [b"aborted"], keys=[b"k"], timestamps=1000, producer_id=7, producer_epoch=0, base_sequence=0, transactional=True
    )
    partition_log.append_as_leader(aborted, leader_epoch=0)  # 1
    partition_log.append_marker(7, 0, ABORT, leader_epoch=0)  # 2
    partition_log.roll()
    partition_log.append_as_leader(encode_batch([b"other"], keys=[b"o"], timestamps=1000), leader_epoch=0)
    partition_log.roll()
    replicated(partition_log)
    result = compact(partition_log)
    assert result is not None and result.records_removed == 1
    kept = [(batch.header.base_offset, batch.values) for batch in read_all(partition_log)]
    assert kept[0] == (0, [b"committed"]) and 1 not in [offset for offset, _ in kept]
    assert partition_log.aborted_transactions(0, 4) == [AbortedTxn(7, 1, 2, 3)]  # the index goes with the copy


def _batches_and_ends(partition_log: PartitionLog) -> list[tuple[int, int]]:
    """(file position where each batch of the single segment ends, offset after it)."""
    ends = []
    position = 0
    for batch in read_all(partition_log):
        position += batch.header.size
        ends.append((position, batch.header.next_offset))
    return ends


def test_recovery_from_a_log_cut_at_every_byte_of_a_transactional_segment(tmp_path: Path) -> None:
    """Whatever byte a crash cuts the segment at, reopening keeps the whole batches before the cut
    and exactly the transactional state those batches make: the aborts whose markers survived in
    the index, the rest of the transactions open."""
    config = LogConfig.from_configs({})
    source = PartitionLog.open(tmp_path / "source-0", config)
    steps = [
        ("data", 1, 0),
        ("data", 2, 0),
        ("abort", 1, 0),
        ("data", 2, 1),
        ("commit", 2, 0),
        ("data", 1, 0),
        ("abort", 1, 0),
    ]
    sequences = {1: 0, 2: 0}
    for kind, producer_id, _ in steps:
        if kind == "data":
            source.append_as_leader(transactional(1, sequences[producer_id], producer_id=producer_id), leader_epoch=0)
            sequences[producer_id] += 1
        else:
            marker = ABORT if kind == "abort" else COMMIT
            source.append_marker(producer_id, 0, marker, leader_epoch=0)
            sequences[producer_id] = 0
    ends = _batches_and_ends(source)
    source.close()
    data = (tmp_path / "source-0" / f"{0:020d}.log").read_bytes()
    # The files beside the log describe all of it: recovery must cut them back to what survives.
    beside = {
        name: (tmp_path / "source-0" / name).read_bytes()
        for name in os.listdir(tmp_path / "source-0")
        if name.endswith((TXN_INDEX_SUFFIX, ".snapshot"))
    }
    assert any(name.endswith(TXN_INDEX_SUFFIX) for name in beside)
    # What the full log's state is after each whole batch: the model the cut logs are checked against.
    model = PartitionLog.open(tmp_path / "model-0", config)
    expected: dict[int, tuple[dict[int, int], list[AbortedTxn]]] = {0: ({}, [])}
    position = 0
    for end_position, next_offset in ends:
        model.append_as_follower(data[position:end_position])
        expected[next_offset] = (dict(model.producer_state.ongoing), model.aborted_transactions(0, next_offset))
        position = end_position
    model.close()
    for cut in range(len(data) + 1):
        folder = tmp_path / f"cut{cut}-0"
        folder.mkdir()
        (folder / f"{0:020d}.log").write_bytes(data[:cut])
        for name, content in beside.items():
            (folder / name).write_bytes(content)
        recovered = PartitionLog.open(folder, config)
        whole = max((offset for end, offset in ends if end <= cut), default=0)
        assert recovered.log_end_offset == whole, cut
        ongoing, aborted = expected[whole]
        assert recovered.producer_state.ongoing == ongoing, cut
        assert recovered.aborted_transactions(0, whole + 1) == aborted, cut
        recovered.close_without_flush()
        for name in os.listdir(folder):
            (folder / name).unlink()
        folder.rmdir()
