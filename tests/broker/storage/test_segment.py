"""One segment on its own: appends index sparsely, reads whole batches, truncation cuts at batch
boundaries, and a read never serves a batch that fails its CRC."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tidelog.broker.storage.segment import LogSegment
from tidelog.common.errors import KafkaStorageError
from tidelog.common.record.batch import decode_batches, encode_batch, read_header


@pytest.fixture
def segment(tmp_path: Path) -> Iterator[LogSegment]:
    opened = LogSegment(tmp_path, 100, index_interval_bytes=200, max_index_entries=64, rolling_base_ms=0)
    yield opened
    opened.close()


def _append(segment: LogSegment, base_offset: int, count: int, timestamp: int = 1000) -> int:
    data = encode_batch([b"v%03d" % i + b"." * 60 for i in range(count)], base_offset=base_offset, timestamps=timestamp)
    return segment.append(data, read_header(data))


def test_appends_grow_offsets_and_index_every_interval(segment: LogSegment) -> None:
    positions = [_append(segment, 100 + 3 * n, 3, timestamp=1000 + n) for n in range(10)]
    assert segment.next_offset == 130 and segment.last_offset == 129
    assert positions[0] == 0 and positions == sorted(positions)
    # Entries only every index.interval.bytes (200 here), never at position 0.
    assert 0 < len(segment.offset_index) < 10
    for offset, position in zip(segment.offset_index.keys, segment.offset_index.values, strict=True):
        assert position in positions and position > 0
        assert read_header(segment.read_at(61, position)).base_offset == 100 + offset
    with pytest.raises(AssertionError, match="must grow"):
        _append(segment, 110, 1)


def test_a_read_returns_whole_batches_from_the_one_holding_the_offset(segment: LogSegment) -> None:
    for n in range(5):
        _append(segment, 100 + 2 * n, 2)
    data = segment.read(105, max_bytes=10_000, max_offset=10_000, min_one_batch=False)
    assert [batch.header.base_offset for batch in decode_batches(bytes(data))] == [104, 106, 108]
    limited = segment.read(100, max_bytes=1, max_offset=10_000, min_one_batch=True)
    assert [batch.header.base_offset for batch in decode_batches(bytes(limited))] == [100]  # KIP-74: at least one
    assert segment.read(100, max_bytes=1, max_offset=10_000, min_one_batch=False) == bytearray()
    below_hw = segment.read(100, max_bytes=10_000, max_offset=104, min_one_batch=False)
    assert [batch.header.base_offset for batch in decode_batches(bytes(below_hw))] == [100, 102]
    assert segment.read(200, max_bytes=10_000, max_offset=10_000, min_one_batch=False) == bytearray()


def test_truncation_cuts_at_the_batch_holding_the_offset_and_appends_resume(segment: LogSegment) -> None:
    for n in range(6):
        _append(segment, 100 + 2 * n, 2)
    size = segment.size
    removed = segment.truncate_to(105)  # 105 is inside the batch 104-105: that batch goes too
    assert removed > 0 and segment.size == size - removed
    assert segment.next_offset == 104
    assert all(100 + key < 104 for key in segment.offset_index.keys)
    _append(segment, 104, 1)
    data = segment.read(100, max_bytes=10_000, max_offset=10_000, min_one_batch=False)
    assert [batch.header.base_offset for batch in decode_batches(bytes(data))] == [100, 102, 104]


def test_a_corrupt_batch_is_never_served_and_the_good_ones_before_it_are(segment: LogSegment) -> None:
    _append(segment, 100, 2)
    second = _append(segment, 102, 2)
    descriptor = os.open(segment.log_path, os.O_WRONLY)
    try:
        os.pwrite(descriptor, b"X", second + 70)  # a byte inside the second batch's records
    finally:
        os.close(descriptor)
    served = segment.read(100, max_bytes=10_000, max_offset=10_000, min_one_batch=False)
    assert [batch.header.base_offset for batch in decode_batches(bytes(served))] == [100]
    with pytest.raises(KafkaStorageError, match="fails validation"):
        segment.read(102, max_bytes=10_000, max_offset=10_000, min_one_batch=False)


def test_timestamps_find_the_first_record_at_or_after(segment: LogSegment) -> None:
    for n in range(4):
        _append(segment, 100 + 2 * n, 2, timestamp=1000 * (n + 1))
    found = segment.find_offset_by_timestamp(2500)
    assert found == (104, 3000)
    assert segment.find_offset_by_timestamp(1) == (100, 1000)
    assert segment.find_offset_by_timestamp(10_000) is None


def test_a_flush_fsyncs_the_log_only_when_bytes_changed_since_the_last(
    segment: LogSegment, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(descriptor: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{descriptor}"))
        real_fsync(descriptor)

    monkeypatch.setattr(os, "fsync", fsync)

    def log_syncs() -> int:
        return synced.count(str(segment.log_path))

    segment.flush()
    assert log_syncs() == 0  # new and empty: nothing to make durable
    _append(segment, 100, 3)
    _append(segment, 103, 3)
    segment.flush()
    segment.flush()
    assert log_syncs() == 1  # the appends once, then nothing new
    segment.truncate_to(104)
    segment.flush()
    assert log_syncs() == 2  # a cut is a change too
    segment.close()
    reopened = LogSegment(
        segment.log_path.parent, 100, index_interval_bytes=200, max_index_entries=64, rolling_base_ms=0
    )
    reopened.flush()
    assert log_syncs() == 3  # bytes found on opening: not known durable
    reopened.close()


def test_a_time_index_without_entries_makes_no_file_and_is_not_rebuilt_at_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No file is made for an index without entries; a time index can be empty while the offset
    # index is not (no timestamp ever grew past the first), and rebuilding then would validate
    # the whole segment at every open.
    segment = LogSegment(tmp_path, 0, index_interval_bytes=200, max_index_entries=64, rolling_base_ms=0)
    for n in range(10):
        _append(segment, 3 * n, 3, timestamp=-1)
    assert len(segment.offset_index) > 0 and len(segment.time_index) == 0
    segment.offset_index.flush()
    segment.time_index.flush()
    segment.close()
    assert segment.offset_index.path.exists() and not segment.time_index.path.exists()
    rebuilt: list[bool] = []
    monkeypatch.setattr(LogSegment, "_rebuild_state", lambda self, **_: rebuilt.append(True) or 0)
    reopened = LogSegment(tmp_path, 0, index_interval_bytes=200, max_index_entries=64, rolling_base_ms=0)
    assert reopened.load_indexes() is False and rebuilt == []
    assert reopened.next_offset == 30 and len(reopened.time_index) == 0
    reopened.close()


def test_index_files_the_listing_lacks_are_neither_read_nor_cut_and_are_made_once_they_hold_entries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A restart opens thousands of small segments whose indexes never held an entry: the folder's
    # listing says so, and recovery must not read or cut files that are not there.
    small = LogSegment(tmp_path, 0, index_interval_bytes=4096, max_index_entries=64, rolling_base_ms=0)
    for n in range(3):
        _append(small, 3 * n, 3)
    small.flush()
    small.close()
    listing = set(os.listdir(tmp_path))
    assert listing == {"00000000000000000000.log"}
    touched: list[object] = []
    monkeypatch.setattr(os, "truncate", lambda path, length: touched.append(path))
    monkeypatch.setattr(Path, "read_bytes", lambda self: touched.append(self) or b"")
    reopened = LogSegment(
        tmp_path, 0, index_interval_bytes=200, max_index_entries=64, rolling_base_ms=0, present=listing
    )
    assert reopened.recover(max_message_bytes=1 << 20) == 0
    assert reopened.next_offset == 9 and reopened.txn_index.entries == []
    reopened.flush()
    assert touched == []
    monkeypatch.undo()
    # Entries now (the index interval is smaller this life): the files are made with them.
    for n in range(3, 10):
        _append(reopened, 3 * n, 3)
    reopened.flush()
    reopened.close()
    assert reopened.offset_index.path.exists() and reopened.time_index.path.exists()
    again = LogSegment(
        tmp_path, 0, index_interval_bytes=200, max_index_entries=64, rolling_base_ms=0, present=os.listdir(tmp_path)
    )
    assert again.load_indexes() is False  # trusted: the files the listing shows are read
    assert again.next_offset == 30 and len(again.offset_index) == len(reopened.offset_index) > 0
    found = again.read(13, 10_000, max_offset=30, min_one_batch=False)
    assert [batch.header.base_offset for batch in decode_batches(bytes(found))] == list(range(12, 30, 3))
    again.close()
