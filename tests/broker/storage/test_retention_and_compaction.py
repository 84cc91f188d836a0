from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidelog.broker.storage import LogCleaner, LogConfig, PartitionLog, compact
from tidelog.broker.storage.log_cleaner import dirty_ratio
from tidelog.common.errors import OffsetOutOfRangeError
from tidelog.common.record.batch import encode_batch
from tidelog.common.record.compression import CompressionType

from .conftest import FakeClock, OpenLog, read_all, records_of, wall_clock

HOUR_MS = 3_600_000


def _append(partition_log: PartitionLog, keys: list[bytes], values: list[bytes | None], timestamp: int) -> None:
    """Append as a leader whose followers keep up: the high watermark follows (the cleaner stays
    below it and below the last stable offset)."""
    partition_log.append_as_leader(encode_batch(values, keys=keys, timestamps=timestamp), leader_epoch=0)
    partition_log.update_high_watermark(partition_log.log_end_offset)


# ---- retention --------------------------------------------------------------------------------


def test_retention_ms_deletes_old_segments_but_never_the_active_one(open_log: OpenLog, clock: FakeClock) -> None:
    partition_log = open_log(segment_bytes=4096, retention_ms=HOUR_MS)
    for _ in range(100):
        _append(partition_log, [b"k"], [b"v" * 100], clock.now_ms)
        clock.advance_ms(60_000)  # one record a minute: 100 minutes in all
    segments = partition_log.segments()
    assert len(segments) > 3
    deleted = partition_log.apply_retention()
    assert deleted > 0
    remaining = partition_log.segments()
    horizon = clock.now_ms - HOUR_MS
    assert all(segment.max_timestamp >= horizon for segment in remaining[:-1])
    assert remaining[0].base_offset == partition_log.log_start_offset
    assert not segments[0].log_path.exists()
    clock.advance_ms(10 * HOUR_MS)
    partition_log.apply_retention()
    assert partition_log.segments()[-1] is remaining[-1]  # the active segment survives expiry
    assert partition_log.log_end_offset == 100


def test_retention_bytes_keeps_the_partition_under_its_size(open_log: OpenLog, clock: FakeClock) -> None:
    partition_log = open_log(segment_bytes=4096, retention_bytes=10_000)
    for _ in range(200):
        _append(partition_log, [b"k"], [b"v" * 100], clock.now_ms)
    partition_log.apply_retention()
    sizes = [segment.size for segment in partition_log.segments()]
    assert sum(sizes) - sizes[0] < 10_000 <= sum(sizes) + sizes[0]
    records = records_of(read_all(partition_log))
    assert records[-1][0] == 199
    assert records[0][0] == partition_log.log_start_offset


def test_delete_records_moves_the_log_start(open_log: OpenLog, clock: FakeClock) -> None:
    partition_log = open_log(segment_bytes=4096)
    for _ in range(200):
        _append(partition_log, [b"k"], [b"v" * 100], clock.now_ms)
    partition_log.update_high_watermark(150)
    with pytest.raises(OffsetOutOfRangeError, match="high watermark"):
        partition_log.delete_records(151)
    assert partition_log.delete_records(120) == 120
    assert partition_log.segments()[0].base_offset <= 120 < partition_log.segments()[0].next_offset
    with pytest.raises(OffsetOutOfRangeError):
        partition_log.read(119, 1000)
    assert records_of(read_all(partition_log))[0][0] >= 117  # the batch holding 120 may start just below
    partition_log.close()
    assert open_log(segment_bytes=4096).log_start_offset == 120


# ---- compaction -------------------------------------------------------------------------------


def _latest_by_key(records: list[tuple[int, bytes | None, bytes | None]]) -> dict[bytes | None, bytes | None]:
    return {key: value for _, key, value in records}


def test_compaction_keeps_the_last_record_of_each_key_at_its_offset(open_log: OpenLog, clock: FakeClock) -> None:
    partition_log = open_log(segment_bytes=4096, cleanup_policy="compact")
    written = []
    for number in range(600):
        key, value = b"key-%d" % (number % 17), b"value-%d" % number
        _append(partition_log, [key], [value], clock.now_ms)
        written.append((number, key, value))
    before = records_of(read_all(partition_log))
    active_bytes = partition_log.segments()[-1].log_path.read_bytes()
    active_start = partition_log.segments()[-1].base_offset
    result = compact(partition_log)
    assert result is not None and result.records_removed > 0
    after = records_of(read_all(partition_log))
    assert _latest_by_key(after) == _latest_by_key(before)
    assert set(after) <= set(written)  # same offsets, same keys, same values
    offsets = [offset for offset, _, _ in after]
    assert offsets == sorted(set(offsets))
    cleaned = [(offset, key) for offset, key, _ in after if offset < active_start]
    assert len({key for _, key in cleaned}) == len(cleaned)  # one record per key in the cleaned part
    assert partition_log.segments()[-1].log_path.read_bytes() == active_bytes  # active untouched
    assert partition_log.log_end_offset == 600
    assert partition_log.append_as_leader(encode_batch([b"v"], keys=[b"k"]), leader_epoch=0).first_offset == 600


def test_tombstones_stay_for_delete_retention_ms_then_go(open_log: OpenLog, clock: FakeClock) -> None:
    partition_log = open_log(segment_bytes=4096, cleanup_policy="compact", delete_retention_ms=HOUR_MS)
    for number in range(100):
        _append(partition_log, [b"key-%d" % (number % 5)], [b"v" * 50], clock.now_ms)
    _append(partition_log, [b"key-0"], [None], clock.now_ms)
    for number in range(100):
        _append(partition_log, [b"other-%d" % (number % 5)], [b"v" * 50], clock.now_ms)
    compact(partition_log)
    records = records_of(read_all(partition_log))
    assert (b"key-0", None) in [(key, value) for _, key, value in records]
    assert b"key-0" not in [key for _, key, value in records if value is not None]
    clock.advance_ms(HOUR_MS + 1)
    _append(partition_log, [b"x"], [b"y"], clock.now_ms)
    partition_log.roll()
    compact(partition_log)
    records = records_of(read_all(partition_log))
    assert b"key-0" not in [key for _, key, _ in records]
    assert {key for _, key, _ in records} >= {b"key-1", b"key-4", b"other-0", b"x"}


def test_min_compaction_lag_protects_recent_records(open_log: OpenLog, clock: FakeClock) -> None:
    partition_log = open_log(segment_bytes=4096, cleanup_policy="compact", min_compaction_lag_ms=HOUR_MS)
    for number in range(300):
        _append(partition_log, [b"same"], [b"v%d" % number], clock.now_ms)
    assert compact(partition_log) is None
    clock.advance_ms(HOUR_MS)
    assert compact(partition_log) is not None


def test_compaction_keeps_the_batch_compression(open_log: OpenLog, clock: FakeClock) -> None:
    partition_log = open_log(segment_bytes=4096, cleanup_policy="compact")
    for number in range(60):
        partition_log.append_as_leader(
            encode_batch(
                [b"v%d" % number] * 4,
                keys=[b"a", b"b", b"a", b"c"],
                timestamps=clock.now_ms,
                compression=CompressionType.ZSTD,
            ),
            leader_epoch=0,
        )
    partition_log.update_high_watermark(partition_log.log_end_offset)
    compact(partition_log)
    batches = read_all(partition_log)
    assert {batch.header.compression for batch in batches} == {CompressionType.ZSTD}
    assert _latest_by_key(records_of(batches)) == {b"a": b"v59", b"b": b"v59", b"c": b"v59"}


def test_compaction_survives_reopen(open_log: OpenLog, clock: FakeClock) -> None:
    partition_log = open_log(segment_bytes=4096, cleanup_policy="compact")
    for number in range(400):
        _append(partition_log, [b"k%d" % (number % 3)], [b"v%d" % number], clock.now_ms)
    compact(partition_log)
    expected = records_of(read_all(partition_log))
    partition_log.close()
    reopened = open_log(segment_bytes=4096, cleanup_policy="compact")
    assert records_of(read_all(reopened)) == expected
    assert compact(reopened) is None  # the cleaner checkpoint remembers what is clean


def test_appends_go_on_while_the_cleaner_runs(open_log: OpenLog, clock: FakeClock) -> None:
    partition_log = open_log(segment_bytes=8192, cleanup_policy="compact", min_cleanable_dirty_ratio=0.01)
    for number in range(3000):
        _append(partition_log, [b"k%d" % (number % 50)], [b"%06d" % number], clock.now_ms)
    cleaner = LogCleaner(lambda: [partition_log], backoff_ms=1)
    stop = threading.Event()
    appended: list[int] = []

    def produce() -> None:
        number = 3000
        while not stop.is_set() and number < 20_000:
            _append(partition_log, [b"k%d" % (number % 50)], [b"%06d" % number], clock.now_ms)
            appended.append(number)
            number += 1

    producer = threading.Thread(target=produce)
    cleaner.start()
    producer.start()
    try:
        assert _wait_for(lambda: cleaner.passes >= 3 and len(appended) > 500, seconds=60)
    finally:
        stop.set()
        producer.join()
        cleaner.stop()
    records = records_of(read_all(partition_log))
    assert partition_log.log_end_offset == 3000 + len(appended)
    latest = _latest_by_key(records)
    for key_number in range(50):
        last = max(number for number in range(3000 + len(appended)) if number % 50 == key_number)
        assert latest[b"k%d" % key_number] == b"%06d" % last
    assert all(int(value or b"0") == offset for offset, _, value in records)  # offsets never moved


def _wait_for(condition: Callable[[], bool], seconds: float) -> bool:
    deadline = threading.Event()
    timer = threading.Timer(seconds, deadline.set)
    timer.start()
    try:
        while not deadline.is_set():
            if condition():
                return True
            deadline.wait(0.01)
        return False
    finally:
        timer.cancel()


def test_dirty_ratio_drives_the_cleaner(open_log: OpenLog, clock: FakeClock) -> None:
    partition_log = open_log(segment_bytes=4096, cleanup_policy="compact", min_cleanable_dirty_ratio=0.5)
    for number in range(300):
        _append(partition_log, [b"k%d" % (number % 4)], [b"v" * 20], clock.now_ms)
    assert dirty_ratio(partition_log, clock.now_ms) == 1.0
    cleaner = LogCleaner(lambda: [partition_log])
    assert len(cleaner.run_once()) == 1
    assert dirty_ratio(partition_log, clock.now_ms) == 0.0
    assert cleaner.run_once() == []


@given(
    st.lists(
        st.tuples(st.integers(0, 9), st.one_of(st.none(), st.binary(min_size=1, max_size=30))),
        min_size=1,
        max_size=300,
    )
)
def test_compaction_property(tmp_path_factory: pytest.TempPathFactory, writes: list[tuple[int, bytes | None]]) -> None:
    clock = wall_clock()
    folder: Path = tmp_path_factory.mktemp("compaction") / "topic-0"
    config = LogConfig.from_configs({"segment.bytes": 4096, "cleanup.policy": "compact", "delete.retention.ms": 0})
    partition_log = PartitionLog.open(folder, config, clock=clock.millis)
    try:
        for key_number, value in writes:
            _append(partition_log, [b"key-%d" % key_number], [value], clock.now_ms)
        partition_log.roll()
        clock.advance_ms(1)
        compact(partition_log)
        records = records_of(read_all(partition_log))
        offsets = [offset for offset, _, _ in records]
        assert offsets == sorted(set(offsets))
        assert all(writes[offset] == (int(key[4:]), value) for offset, key, value in records if key)
        final = {b"key-%d" % key_number: value for key_number, value in writes}
        live = {key: value for key, value in final.items() if value is not None}
        assert {key: value for _, key, value in records} == live  # tombstones gone, latest kept
        assert len(records) == len(live)
    finally:
        partition_log.close_without_flush()
