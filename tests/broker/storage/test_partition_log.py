from __future__ import annotations

import os
from pathlib import Path

import pytest

from tidelog.broker.storage import LogConfig, PartitionLog
from tidelog.broker.storage.log_files import (
    HIGH_WATERMARK_FILE,
    LOG_START_OFFSET_FILE,
    RECOVERY_POINT_FILE,
)
from tidelog.common.errors import (
    CorruptRecordError,
    InvalidRecordError,
    KafkaStorageError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
)
from tidelog.common.record.batch import decode_batch, encode_batch, read_header

from .conftest import FakeClock, OpenLog, held_by_a_thread, read_all, records_of


def batch_of(count: int, start: int = 0, size: int = 10, timestamp: int = 1000) -> bytes:
    return encode_batch(
        [b"%0*d" % (size, start + index) for index in range(count)],
        keys=[b"k%d" % (start + index) for index in range(count)],
        timestamps=[timestamp + index for index in range(count)],
    )


def test_leader_append_assigns_offsets_and_reads_them_back(open_log: OpenLog) -> None:
    partition_log = open_log()
    first = partition_log.append_as_leader(batch_of(3), leader_epoch=0)
    second = partition_log.append_as_leader(batch_of(2, start=3), leader_epoch=0)
    assert (first.first_offset, first.last_offset) == (0, 2)
    assert (second.first_offset, second.last_offset) == (3, 4)
    assert partition_log.log_end_offset == 5
    records = records_of(read_all(partition_log))
    assert [offset for offset, _, _ in records] == [0, 1, 2, 3, 4]
    assert [value for _, _, value in records] == [b"%010d" % index for index in range(5)]


def test_read_returns_the_whole_batch_holding_the_offset(open_log: OpenLog) -> None:
    partition_log = open_log()
    partition_log.append_as_leader(batch_of(10), leader_epoch=0)
    partition_log.append_as_leader(batch_of(10, start=10), leader_epoch=0)
    data = partition_log.read(15, 1 << 20)
    assert read_header(data).base_offset == 10
    assert len(data) == read_header(data).size  # whole batches only


def test_read_stops_below_max_offset(open_log: OpenLog) -> None:
    partition_log = open_log()
    for start in range(0, 30, 10):
        partition_log.append_as_leader(batch_of(10, start=start), leader_epoch=0)
    batches = []
    data = partition_log.read(0, 1 << 20, max_offset=20)
    position = 0
    while position < len(data):
        batches.append(decode_batch(data, position))
        position += batches[-1].header.size
    assert [batch.header.base_offset for batch in batches] == [0, 10]
    assert partition_log.read(20, 1 << 20, max_offset=20) == b""


def test_read_respects_max_bytes_but_always_returns_one_batch(open_log: OpenLog) -> None:
    partition_log = open_log()
    for start in range(0, 30, 10):
        partition_log.append_as_leader(batch_of(10, start=start, size=100), leader_epoch=0)
    one_batch = read_header(partition_log.read(0, 1 << 20)).size
    assert len(partition_log.read(0, one_batch + 10)) == one_batch
    assert len(partition_log.read(0, 10)) == one_batch
    assert partition_log.read(0, 10, min_one_batch=False) == b""


def test_read_outside_the_log_is_offset_out_of_range(open_log: OpenLog) -> None:
    partition_log = open_log()
    partition_log.append_as_leader(batch_of(5), leader_epoch=0)
    assert partition_log.read(5, 1000) == b""
    with pytest.raises(OffsetOutOfRangeError):
        partition_log.read(6, 1000)
    with pytest.raises(OffsetOutOfRangeError):
        partition_log.read(-1, 1000)


def test_segments_roll_on_segment_bytes_and_every_offset_stays_readable(open_log: OpenLog) -> None:
    partition_log = open_log(segment_bytes=4096, index_interval_bytes=128)
    for start in range(0, 1000, 5):
        partition_log.append_as_leader(batch_of(5, start=start, size=40), leader_epoch=0)
    segments = partition_log.segments()
    assert len(segments) > 10
    assert all(segment.size <= 4096 for segment in segments)
    assert [segment.base_offset for segment in segments] == sorted(segment.base_offset for segment in segments)
    for offset in range(0, 1000, 7):
        header = read_header(partition_log.read(offset, 100))
        assert header.base_offset <= offset <= header.last_offset
    names = sorted(os.listdir(segments[0].directory))
    assert f"{segments[1].base_offset:020d}.log" in names
    assert f"{segments[1].base_offset:020d}.index" in names
    assert f"{segments[1].base_offset:020d}.timeindex" in names


def test_segments_roll_on_segment_ms(open_log: OpenLog, clock: FakeClock) -> None:
    partition_log = open_log(segment_ms=60_000)
    partition_log.append_as_leader(batch_of(1), leader_epoch=0)
    clock.advance_ms(59_999)
    partition_log.append_as_leader(batch_of(1), leader_epoch=0)
    assert len(partition_log.segments()) == 1
    clock.advance_ms(1)
    partition_log.append_as_leader(batch_of(1), leader_epoch=0)
    assert [segment.base_offset for segment in partition_log.segments()] == [0, 2]


def test_segments_roll_when_the_index_is_full(open_log: OpenLog) -> None:
    partition_log = open_log(segment_index_bytes=64, index_interval_bytes=0)  # 8 entries
    for start in range(40):
        partition_log.append_as_leader(batch_of(1, start=start), leader_epoch=0)
    segments = partition_log.segments()
    assert len(segments) >= 4
    assert all(len(segment.offset_index) <= 8 for segment in segments)


def test_offset_lookup_by_timestamp(open_log: OpenLog) -> None:
    partition_log = open_log(segment_bytes=4096, index_interval_bytes=100)
    for start in range(0, 500, 5):
        partition_log.append_as_leader(batch_of(5, start=start, timestamp=10_000 + start * 10), leader_epoch=0)
    # record at offset n has timestamp 10_000 + 10 * n (batch_of adds the index within the batch)
    for start in range(0, 500, 5):
        for index in range(5):
            offset = start + index
            expected_timestamp = 10_000 + start * 10 + index
            assert partition_log.offset_for_timestamp(expected_timestamp) == (offset, expected_timestamp)
    assert partition_log.offset_for_timestamp(0) == (0, 10_000)
    assert partition_log.offset_for_timestamp(10**12) is None


def test_log_append_time_stamps_batches(open_log: OpenLog, clock: FakeClock) -> None:
    partition_log = open_log(message_timestamp_type="LogAppendTime")
    info = partition_log.append_as_leader(batch_of(3, timestamp=5), leader_epoch=0)
    assert info.log_append_time_ms == clock.now_ms
    (batch,) = read_all(partition_log)
    assert batch.timestamps == [clock.now_ms] * 3


# ---- bad input never half-writes ------------------------------------------------------------


@pytest.mark.parametrize(
    ("damage", "error"),
    [
        (lambda data: data.__setitem__(-1, data[-1] ^ 1), CorruptRecordError),  # CRC
        (lambda data: data.__setitem__(16, 7), InvalidRecordError),  # magic
        (lambda data: data.__setitem__(slice(8, 12), (10**6).to_bytes(4, "little")), CorruptRecordError),
    ],
    ids=["bad-crc", "wrong-magic", "inconsistent-length"],
)
def test_bad_batches_are_rejected_and_nothing_is_written(
    open_log: OpenLog, damage: object, error: type[Exception]
) -> None:
    partition_log = open_log()
    partition_log.append_as_leader(batch_of(2), leader_epoch=0)
    good = batch_of(2, start=2)
    bad = bytearray(batch_of(2, start=4))
    damage(bad)  # type: ignore[operator]
    size_before = partition_log.size_bytes
    with pytest.raises(error):
        partition_log.append_as_leader(good + bytes(bad), leader_epoch=0)  # good first, bad second
    assert partition_log.log_end_offset == 2
    assert partition_log.size_bytes == size_before
    assert records_of(read_all(partition_log))[-1][0] == 1


def test_oversized_batch_is_message_too_large(open_log: OpenLog) -> None:
    partition_log = open_log(max_message_bytes=1000)
    with pytest.raises(RecordTooLargeError):
        partition_log.append_as_leader(encode_batch([b"x" * 2000]), leader_epoch=0)
    assert partition_log.log_end_offset == 0


def test_max_message_bytes_does_not_count_the_columns_so_a_kafka_sized_batch_fits_and_survives_recovery(
    open_log: OpenLog,
) -> None:
    # 100 records of 10 bytes: 61 + 100 x (24 + 10) = 3,461 bytes stored; Kafka's v2 format holds
    # them in about 61 + 100 x 18 = 1,861. Within a 2,000-byte limit, as librdkafka expects.
    limit = 2000
    partition_log = open_log(max_message_bytes=limit)
    batch = encode_batch([b"0123456789"] * 100)
    assert len(batch) > limit
    partition_log.append_as_leader(batch, leader_epoch=0)
    with pytest.raises(RecordTooLargeError):  # counted: 61 + 100 x 20 bytes of values
        partition_log.append_as_leader(encode_batch([b"x" * 20] * 100), leader_epoch=0)
    partition_log.close_without_flush()  # unclean: the next open recovers the segment
    reopened = open_log(max_message_bytes=limit)
    assert reopened.log_end_offset == 100


def test_empty_append_is_rejected(open_log: OpenLog) -> None:
    with pytest.raises(InvalidRecordError):
        open_log().append_as_leader(b"", leader_epoch=0)


def test_producer_batch_with_offset_gaps_is_rejected(open_log: OpenLog) -> None:
    gapped = encode_batch([b"a", b"b"], offset_deltas=[0, 2], last_offset_delta=2)
    with pytest.raises(InvalidRecordError):
        open_log().append_as_leader(gapped, leader_epoch=0)


def test_compacted_topic_rejects_records_without_keys(open_log: OpenLog) -> None:
    partition_log = open_log(cleanup_policy="compact")
    with pytest.raises(InvalidRecordError, match="key"):
        partition_log.append_as_leader(encode_batch([b"v"]), leader_epoch=0)


# ---- follower appends, epochs and truncation ------------------------------------------------


def test_follower_append_keeps_offsets_and_epochs(open_log: OpenLog) -> None:
    leader = open_log("leader-0")
    follower = open_log("follower-0")
    leader.append_as_leader(batch_of(3), leader_epoch=1)
    leader.append_as_leader(batch_of(3, start=3), leader_epoch=4)
    follower.append_as_follower(leader.read(0, 1 << 20))
    assert follower.log_end_offset == 6
    assert follower.leader_epochs.entries() == [(1, 0), (4, 3)]
    assert follower.leader_epochs.end_offset_for(1, follower.log_end_offset) == (1, 3)
    assert follower.leader_epochs.end_offset_for(3, follower.log_end_offset) == (1, 3)
    assert follower.leader_epochs.end_offset_for(4, follower.log_end_offset) == (4, 6)
    with pytest.raises(InvalidRecordError, match="below the expected offset"):
        follower.append_as_follower(leader.read(3, 1 << 20))


def test_truncate_to_removes_whole_batches_across_segments(open_log: OpenLog) -> None:
    partition_log = open_log(segment_bytes=4096)
    for start in range(0, 400, 4):
        partition_log.append_as_leader(batch_of(4, start=start, size=50), leader_epoch=start // 100)
    partition_log.update_high_watermark(300)
    partition_log.truncate_to(150)
    assert partition_log.log_end_offset == 148  # the batch 148..151 held 150: all of it goes
    assert partition_log.high_watermark == 148
    assert partition_log.leader_epochs.latest_epoch == 1
    assert [offset for offset, _, _ in records_of(read_all(partition_log))] == list(range(148))
    info = partition_log.append_as_leader(batch_of(2), leader_epoch=5)
    assert info.first_offset == 148


def test_truncate_fully_and_start_at(open_log: OpenLog) -> None:
    partition_log = open_log()
    partition_log.append_as_leader(batch_of(5), leader_epoch=0)
    partition_log.truncate_fully_and_start_at(1000)
    assert (partition_log.log_start_offset, partition_log.log_end_offset) == (1000, 1000)
    assert partition_log.append_as_leader(batch_of(1), leader_epoch=1).first_offset == 1000


def test_high_watermark_stays_within_the_log(open_log: OpenLog) -> None:
    partition_log = open_log()
    partition_log.append_as_leader(batch_of(5), leader_epoch=0)
    assert partition_log.update_high_watermark(10) == 5  # a follower's: bounded by its own log
    assert partition_log.update_high_watermark(3) == 3  # ... and it may go back (a new leader's)


def test_a_leader_s_high_watermark_never_goes_back_nor_past_the_log_end(open_log: OpenLog) -> None:
    partition_log = open_log()
    partition_log.append_as_leader(batch_of(5), leader_epoch=0)
    partition_log.advance_high_watermark(3)
    partition_log.advance_high_watermark(5)
    with pytest.raises(AssertionError, match="past LEO"):
        partition_log.advance_high_watermark(6)
    with pytest.raises(AssertionError, match="HW 5 → 4"):
        partition_log.advance_high_watermark(4)
    assert partition_log.high_watermark == 5


# ---- durability: flush policy, checkpoints, reopen -------------------------------------------


def test_flush_messages_advances_the_recovery_point(open_log: OpenLog) -> None:
    partition_log = open_log(flush_messages=10)
    partition_log.append_as_leader(batch_of(5), leader_epoch=0)
    assert partition_log.recovery_point == 0
    partition_log.append_as_leader(batch_of(5), leader_epoch=0)
    assert partition_log.recovery_point == 10
    assert (partition_log.directory / RECOVERY_POINT_FILE).read_text().split() == ["0", "1", "10"]


def test_flush_ms_flushes_on_the_timer(open_log: OpenLog, clock: FakeClock) -> None:
    partition_log = open_log(flush_ms=1000)
    partition_log.append_as_leader(batch_of(5), leader_epoch=0)
    assert not partition_log.maybe_flush()
    clock.advance_ms(1000)
    assert partition_log.maybe_flush()
    assert partition_log.recovery_point == 5
    assert not partition_log.maybe_flush()  # nothing new


def test_clean_reopen_keeps_everything_and_appends_after_it(open_log: OpenLog) -> None:
    partition_log = open_log(segment_bytes=4096)
    for start in range(0, 300, 3):
        partition_log.append_as_leader(batch_of(3, start=start, size=30), leader_epoch=2)
    partition_log.update_high_watermark(200)
    partition_log.close()
    reopened = open_log(segment_bytes=4096)
    assert (reopened.log_end_offset, reopened.high_watermark) == (300, 200)
    assert reopened.leader_epochs.entries() == [(2, 0)]
    # regression: a reopened segment once wrote from position 0, overwriting its first batches
    reopened.append_as_leader(batch_of(3, start=300, size=30), leader_epoch=2)
    values = [value for _, _, value in records_of(read_all(reopened))]
    assert values == [b"%030d" % index for index in range(303)]


def test_corrupt_checkpoint_files_do_not_prevent_opening(open_log: OpenLog, tmp_path: Path) -> None:
    partition_log = open_log()
    partition_log.append_as_leader(batch_of(5), leader_epoch=0)
    partition_log.close()
    for name in (HIGH_WATERMARK_FILE, LOG_START_OFFSET_FILE, RECOVERY_POINT_FILE, "leader-epoch-checkpoint"):
        (tmp_path / "topic-0" / name).write_text("garbage\n")
    reopened = open_log()
    assert reopened.log_end_offset == 5
    assert reopened.log_start_offset == 0


def test_checkpoints_are_written_atomically(open_log: OpenLog, tmp_path: Path) -> None:
    partition_log = open_log()
    partition_log.append_as_leader(batch_of(5), leader_epoch=0)
    partition_log.flush()
    assert not [name for name in os.listdir(tmp_path / "topic-0") if name.endswith(".tmp")]


def test_closed_log_refuses_work(open_log: OpenLog) -> None:
    partition_log = open_log()
    partition_log.close()
    with pytest.raises(RuntimeError, match="closed"):
        partition_log.append_as_leader(batch_of(1), leader_epoch=0)


def test_corruption_in_flushed_data_is_never_served(open_log: OpenLog, tmp_path: Path) -> None:
    partition_log = open_log()
    for start in range(0, 30, 10):
        partition_log.append_as_leader(batch_of(10, start=start), leader_epoch=0)
    partition_log.flush()
    second = read_header(partition_log.read(10, 100))
    log_file = tmp_path / "topic-0" / f"{0:020d}.log"
    with open(log_file, "r+b") as file:  # bit rot inside the second batch, under a live log
        file.seek(second.size + second.size // 2)
        byte = file.read(1)
        file.seek(-1, os.SEEK_CUR)
        file.write(bytes([byte[0] ^ 0xFF]))
    served = partition_log.read(0, 1 << 20)
    assert len(served) == read_header(served).size  # the good first batch, not the bad second
    with pytest.raises(KafkaStorageError, match="fails validation"):
        partition_log.read(10, 1 << 20)


def test_failed_disk_write_leaves_no_half_batch(open_log: OpenLog, monkeypatch: pytest.MonkeyPatch) -> None:
    partition_log = open_log()
    partition_log.append_as_leader(batch_of(3), leader_epoch=0)
    size_before = partition_log.size_bytes
    real_write = os.write

    def write_half_then_fail(descriptor: int, data: memoryview) -> int:
        monkeypatch.setattr(os, "write", fail)
        return real_write(descriptor, data[: len(data) // 2])

    def fail(descriptor: int, data: memoryview) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "write", write_half_then_fail)
    with pytest.raises(KafkaStorageError, match="No space left"):
        partition_log.append_as_leader(batch_of(3, start=3), leader_epoch=0)
    monkeypatch.setattr(os, "write", real_write)
    assert partition_log.size_bytes == size_before
    assert partition_log.log_end_offset == 3
    assert partition_log.append_as_leader(batch_of(2, start=3), leader_epoch=0).first_offset == 3
    assert [offset for offset, _, _ in records_of(read_all(partition_log))] == [0, 1, 2, 3, 4]


def test_a_created_log_is_an_opened_empty_one_and_survives_reopening(tmp_path: Path, clock: FakeClock) -> None:
    config = LogConfig.from_configs({})
    created = PartitionLog.create(tmp_path / "data" / "new-0", config, clock=clock.millis)
    opened = PartitionLog.open(tmp_path / "old-0", config, clock=clock.millis)
    for log_ in (created, opened):
        assert (log_.log_start_offset, log_.log_end_offset, log_.high_watermark) == (0, 0, 0)
        assert log_.leader_epochs.entries() == []
    assert sorted(os.listdir(tmp_path / "data" / "new-0")) == sorted(os.listdir(tmp_path / "old-0"))
    with pytest.raises(FileExistsError):
        PartitionLog.create(tmp_path / "data" / "new-0", config, clock=clock.millis)
    created.assign_leader_epoch(3)
    created.append_as_leader(batch_of(2), leader_epoch=3)
    created.close()
    opened.close()
    reopened = PartitionLog.open(tmp_path / "data" / "new-0", config, clock=clock.millis)
    assert reopened.log_end_offset == 2 and reopened.leader_epochs.entries() == [(3, 0)]
    reopened.close()


def test_an_append_is_made_here_only_as_page_cache_writes(open_log: OpenLog, clock: FakeClock) -> None:
    """What the broker's event loop may append itself (ADR 0036): page-cache writes only."""
    plain = open_log("plain-0")
    with plain.appendable_here(1024) as here:
        assert here
        plain.append_as_leader(batch_of(2), leader_epoch=0)  # under the same hold (re-entrant)
    with plain.appendable_here(1024) as here:
        assert here
    with plain.appendable_here(2 * 1024 * 1024 * 1024) as here:
        assert not here  # past segment.bytes: a roll
    flushing = open_log("flushing-0", flush_messages=1)
    with flushing.appendable_here(10) as here:
        assert not here  # flush.messages=1: an fsync per append
    rolling = open_log("rolling-0", segment_ms=1000)
    rolling.append_as_leader(batch_of(1), leader_epoch=0)
    clock.advance_ms(1000)
    with rolling.appendable_here(10) as here:
        assert not here  # segment.ms is up: the next append rolls
    with held_by_a_thread(plain), plain.appendable_here(10) as here:
        assert not here  # a thread (a flush, the cleaner) holds the lock: not waited for
    plain.close()
    with plain.appendable_here(10) as here:
        assert not here  # closed: the append's own check raises, on a thread


def test_the_lock_is_never_waited_for_here(open_log: OpenLog) -> None:
    partition_log = open_log()
    with held_by_a_thread(partition_log), partition_log.held_if_free() as held:
        assert not held  # a thread (a flush, the cleaner) has it: not waited for
    with partition_log.held_if_free() as held:
        assert held
