"""Idempotent-producer state kept by the partition log: dedupe, sequence checks, snapshots."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidelog.broker.storage import LogConfig, PartitionLog
from tidelog.broker.storage.producer_state import PRODUCER_BATCHES_RETAINED
from tidelog.common.errors import InvalidProducerEpochError, OutOfOrderSequenceError
from tidelog.common.record.batch import SEQUENCE_MAX, encode_batch

from .conftest import OpenLog, read_all, records_of


def idempotent(count: int, sequence: int, *, producer_id: int = 7, epoch: int = 0, tag: bytes = b"v") -> bytes:
    return encode_batch(
        [tag + b"%d" % (sequence + index) for index in range(count)],
        timestamps=1000,
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=sequence,
    )


def test_a_retried_batch_is_answered_with_its_original_offsets_and_not_written_again(open_log: OpenLog) -> None:
    partition_log = open_log()
    first = partition_log.append_as_leader(idempotent(3, 0), leader_epoch=0)
    partition_log.append_as_leader(idempotent(2, 3), leader_epoch=0)
    again = partition_log.append_as_leader(idempotent(3, 0), leader_epoch=0)
    assert again.duplicate and (again.first_offset, again.last_offset) == (first.first_offset, first.last_offset)
    assert partition_log.log_end_offset == 5
    assert len(records_of(read_all(partition_log))) == 5


def test_a_gap_in_sequences_is_refused_and_nothing_is_written(open_log: OpenLog) -> None:
    partition_log = open_log()
    partition_log.append_as_leader(idempotent(3, 0), leader_epoch=0)
    with pytest.raises(OutOfOrderSequenceError, match="expected 3"):
        partition_log.append_as_leader(idempotent(1, 4), leader_epoch=0)
    assert partition_log.log_end_offset == 3


def test_an_older_producer_epoch_is_fenced_and_a_new_epoch_starts_at_zero(open_log: OpenLog) -> None:
    partition_log = open_log()
    partition_log.append_as_leader(idempotent(2, 0, epoch=1), leader_epoch=0)
    with pytest.raises(InvalidProducerEpochError):
        partition_log.append_as_leader(idempotent(1, 2, epoch=0), leader_epoch=0)
    with pytest.raises(OutOfOrderSequenceError, match="must start at sequence 0"):
        partition_log.append_as_leader(idempotent(1, 5, epoch=2), leader_epoch=0)
    partition_log.append_as_leader(idempotent(1, 0, epoch=2), leader_epoch=0)
    assert partition_log.log_end_offset == 3


def test_only_the_last_five_batches_are_remembered(open_log: OpenLog) -> None:
    partition_log = open_log()
    for sequence in range(PRODUCER_BATCHES_RETAINED + 1):
        partition_log.append_as_leader(idempotent(1, sequence), leader_epoch=0)
    assert partition_log.append_as_leader(idempotent(1, 1), leader_epoch=0).duplicate
    with pytest.raises(OutOfOrderSequenceError):  # older than the kept window: no longer recognised
        partition_log.append_as_leader(idempotent(1, 0), leader_epoch=0)


def test_sequences_wrap_around(open_log: OpenLog) -> None:
    partition_log = open_log()
    partition_log.append_as_leader(idempotent(1, SEQUENCE_MAX - 1), leader_epoch=0)
    with pytest.raises(OutOfOrderSequenceError):
        partition_log.append_as_leader(idempotent(2, 1), leader_epoch=0)
    partition_log.append_as_leader(idempotent(2, SEQUENCE_MAX), leader_epoch=0)  # holds MAX and 0
    partition_log.append_as_leader(idempotent(1, 1), leader_epoch=0)
    assert partition_log.log_end_offset == 4


def test_batches_without_a_producer_are_never_checked(open_log: OpenLog) -> None:
    partition_log = open_log()
    plain = encode_batch([b"x"])
    partition_log.append_as_leader(plain, leader_epoch=0)
    assert not partition_log.append_as_leader(plain, leader_epoch=0).duplicate
    assert partition_log.log_end_offset == 2


@pytest.mark.parametrize("clean", [True, False])
def test_the_state_survives_a_restart(open_log: OpenLog, clean: bool) -> None:
    partition_log = open_log()
    for sequence in range(0, 40, 2):
        partition_log.append_as_leader(idempotent(2, sequence), leader_epoch=0)
        if sequence % 8 == 0:
            partition_log.roll()  # several segments, so several snapshots
    if clean:
        partition_log.close()
    else:
        partition_log.flush()
        partition_log.close_without_flush()
    reopened = open_log()
    assert len(list(reopened.directory.glob("*.snapshot"))) > 1
    assert reopened.append_as_leader(idempotent(2, 38), leader_epoch=0).duplicate
    with pytest.raises(OutOfOrderSequenceError):
        reopened.append_as_leader(idempotent(2, 41), leader_epoch=0)
    reopened.append_as_leader(idempotent(2, 40), leader_epoch=0)


def test_a_follower_learns_the_state_from_replicated_batches(open_log: OpenLog) -> None:
    leader = open_log("t-0")
    follower = open_log("follower/t-0")
    for sequence in range(0, 6, 3):
        leader.append_as_leader(idempotent(3, sequence), leader_epoch=0)
    follower.append_as_follower(leader.read(0, 1 << 20))
    assert follower.append_as_leader(idempotent(3, 3), leader_epoch=1).duplicate
    with pytest.raises(OutOfOrderSequenceError):
        follower.append_as_leader(idempotent(3, 9), leader_epoch=1)


def test_truncation_forgets_the_batches_it_removes(open_log: OpenLog) -> None:
    partition_log = open_log()
    for sequence in range(0, 20, 2):
        partition_log.append_as_leader(idempotent(2, sequence), leader_epoch=0)
        if sequence % 6 == 0:
            partition_log.roll()
    partition_log.truncate_to(14)  # keeps sequences 0..13
    assert partition_log.producer_state.producers[7].last_sequence == 13
    with pytest.raises(OutOfOrderSequenceError):
        partition_log.append_as_leader(idempotent(2, 18), leader_epoch=1)
    again = partition_log.append_as_leader(idempotent(2, 14, tag=b"new"), leader_epoch=1)
    assert not again.duplicate and again.first_offset == 14


def test_unreadable_snapshots_fall_back_to_replaying_the_log(open_log: OpenLog) -> None:
    partition_log = open_log()
    for sequence in range(0, 30, 3):
        partition_log.append_as_leader(idempotent(3, sequence), leader_epoch=0)
        partition_log.roll()
    partition_log.close()
    for snapshot in partition_log.directory.glob("*.snapshot"):
        snapshot.write_bytes(b"{not json")
    reopened = open_log()
    assert reopened.append_as_leader(idempotent(3, 27), leader_epoch=0).duplicate


def test_producers_silent_past_the_expiration_are_forgotten(open_log: OpenLog, clock: object) -> None:
    partition_log = open_log()
    partition_log.append_as_leader(idempotent(1, 0), leader_epoch=0)  # record timestamp 1000
    assert partition_log.expire_producers(expiration_ms=86_400_000) == 1
    assert not partition_log.producer_state.producers


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(1, 4), st.booleans()), min_size=1, max_size=25))
def test_any_sequence_of_sends_and_retries_writes_each_batch_once(
    tmp_path_factory: pytest.TempPathFactory, plan: list[tuple[int, int, bool]]
) -> None:
    """Three producers send batches; some are retried (any earlier one of the last five) — each is written once."""
    directory = tmp_path_factory.mktemp("log") / "t-0"
    partition_log = PartitionLog.open(directory, LogConfig.from_configs({}))
    try:
        next_sequence = [0, 0, 0]
        sent: list[list[tuple[int, int]]] = [[], [], []]
        expected: list[bytes] = []
        for step, (producer, count, retry) in enumerate(plan):
            if step % 4 == 3:
                partition_log.roll()
            if retry and sent[producer]:
                sequence, size = sent[producer][-min(len(sent[producer]), PRODUCER_BATCHES_RETAINED)]
                info = partition_log.append_as_leader(
                    idempotent(size, sequence, producer_id=producer, tag=b"p%d-" % producer), leader_epoch=0
                )
                assert info.duplicate
                continue
            sequence = next_sequence[producer]
            partition_log.append_as_leader(
                idempotent(count, sequence, producer_id=producer, tag=b"p%d-" % producer), leader_epoch=0
            )
            sent[producer].append((sequence, count))
            next_sequence[producer] += count
            expected.extend(b"p%d-%d" % (producer, sequence + index) for index in range(count))
        assert [value for _, _, value in records_of(read_all(partition_log))] == expected
    finally:
        partition_log.close()


def test_a_snapshot_is_written_only_when_batches_came_since_the_last(open_log: OpenLog) -> None:
    # Kafka's takeSnapshot rule: the same offset would load the same state. Closing 10,000 idle
    # logs wrote and synced 10,000 snapshots of nothing.
    partition_log = open_log()
    partition_log.close()
    assert not list(partition_log.directory.glob("*.snapshot"))  # empty at offset 0: no file needed
    reopened = open_log()
    reopened.append_as_leader(idempotent(2, 0), leader_epoch=0)
    reopened.close()
    written = sorted(path.name for path in reopened.directory.glob("*.snapshot"))
    assert written == ["00000000000000000002.snapshot"]
    again = open_log()
    (again.directory / written[0]).write_bytes(b"{}")  # rewritten would be valid again
    again.close()  # loaded at offset 2, nothing since: not written again
    assert (again.directory / written[0]).read_bytes() == b"{}"
