"""The sparse indexes on their own: lookups, truncation, the on-disk format, and what counts as corrupt."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from tidelog.broker.storage.index import CorruptIndexError, OffsetIndex, TimeIndex


def _offsets(tmp_path: Path, base: int = 100, entries: list[tuple[int, int]] | None = None) -> OffsetIndex:
    index = OffsetIndex(tmp_path / "x.index", base, max_entries=16)
    for offset, position in entries if entries is not None else [(100, 0), (110, 4096), (125, 8192)]:
        index.append(offset, position)
    return index


def test_offset_lookup_finds_the_last_entry_at_or_below(tmp_path: Path) -> None:
    index = _offsets(tmp_path)
    assert index.lookup(99) == (100, 0)  # below the first entry: the segment start
    assert index.lookup(100) == (100, 0)
    assert index.lookup(109) == (100, 0)
    assert index.lookup(110) == (110, 4096)
    assert index.lookup(10_000) == (125, 8192)


def test_truncation_drops_entries_at_and_above_and_the_file_follows(tmp_path: Path) -> None:
    index = _offsets(tmp_path)
    index.flush()
    index.truncate_to(110)
    assert len(index) == 1 and index.lookup(200) == (100, 0)
    index.append(111, 5000)  # a new entry after a cut must be written where the cut was
    index.flush()
    reloaded = OffsetIndex(index.path, 100, max_entries=16)
    reloaded.load()
    assert list(zip(reloaded.keys, reloaded.values, strict=True)) == [(0, 0), (11, 5000)]


def test_the_file_is_little_endian_relative_offset_and_position(tmp_path: Path) -> None:
    index = _offsets(tmp_path)
    index.flush()
    assert index.path.read_bytes() == struct.pack("<IIIIII", 0, 0, 10, 4096, 25, 8192)


def test_flush_appends_only_what_is_new(tmp_path: Path) -> None:
    index = _offsets(tmp_path)
    index.flush()
    marker = b"\xff" * 8
    index.path.write_bytes(marker + index.path.read_bytes()[8:])  # only a rewrite would restore entry 0
    index.append(130, 9000)
    index.flush()
    written = index.path.read_bytes()
    assert written[:8] == marker and written[24:] == struct.pack("<II", 30, 9000)


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"\x00" * 7, "not whole entries"),
        (struct.pack("<II", 0, 0) * 17, "at most 16"),
    ],
)
def test_a_file_that_cannot_be_an_index_is_refused_on_load(tmp_path: Path, content: bytes, reason: str) -> None:
    path = tmp_path / "bad.index"
    path.write_bytes(content)
    with pytest.raises(CorruptIndexError, match=reason):
        OffsetIndex(path, 0, max_entries=16).load()


def test_entries_that_do_not_grow_or_point_past_the_log_are_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "x.index"
    path.write_bytes(struct.pack("<IIII", 5, 100, 5, 200))
    index = OffsetIndex(path, 0, max_entries=16)
    index.load()
    with pytest.raises(CorruptIndexError, match="do not grow"):
        index.check(log_size=1000)
    good = OffsetIndex(tmp_path / "good.index", 100, max_entries=16)
    good.append(100, 0)
    good.append(110, 4096)
    good.check(log_size=4097)
    with pytest.raises(CorruptIndexError, match="past the end"):
        good.check(log_size=4096)


def test_appending_out_of_order_or_past_capacity_is_a_bug(tmp_path: Path) -> None:
    index = _offsets(tmp_path)
    with pytest.raises(AssertionError, match="must grow"):
        index.append(125, 9000)
    full = OffsetIndex(tmp_path / "full.index", 0, max_entries=1)
    full.append(0, 0)
    assert full.is_full
    with pytest.raises(AssertionError, match="index full"):
        full.append(1, 10)


def test_time_lookup_gives_an_offset_at_or_before_the_first_later_timestamp(tmp_path: Path) -> None:
    index = TimeIndex(tmp_path / "x.timeindex", 100, max_entries=16)
    for timestamp, offset in [(1000, 100), (2000, 120), (3000, 150)]:
        index.append(timestamp, offset)
    assert index.lookup(500) == 100
    assert index.lookup(1000) == 100
    assert index.lookup(1500) == 100
    assert index.lookup(2500) == 120
    assert index.lookup(99_999) == 150
    assert index.last_timestamp == 3000
    index.truncate_to(120)
    assert index.last_timestamp == 1000
    index.check(next_offset=101)
    with pytest.raises(CorruptIndexError, match="past the end"):
        index.check(next_offset=100)


def test_only_an_index_that_holds_or_held_entries_is_synced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # An index that never held an entry has no bytes to make durable (one missing after a crash
    # is rebuilt from its segment): closing 10,000 idle logs synced 20,000 empty files.
    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda descriptor: (synced.append(descriptor), real_fsync(descriptor))[1])
    empty = _offsets(tmp_path, entries=[])
    empty.flush()
    # Not even made: opening takes a missing index as empty (a broker closing 10,000 new logs
    # created 20,000 empty files).
    assert not empty.path.exists() and synced == []
    (tmp_path / "full").mkdir()
    full = _offsets(tmp_path / "full")
    full.flush()
    assert len(synced) == 1
    full.truncate_to(100)  # emptied: the file held entries, so emptying it is made durable
    full.flush()
    assert len(synced) == 2 and full.path.read_bytes() == b""
