"""Crash recovery: a torn or corrupt tail is cut, indexes are rebuilt, opening never crashes."""

from __future__ import annotations

import os
import random
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidelog.broker.storage import LogConfig, PartitionLog, checkpoint, leader_epoch_cache, offset_checkpoints
from tidelog.broker.storage.checkpoint import read_checkpoint, write_checkpoint
from tidelog.broker.storage.log_files import CLEAN_SHUTDOWN_FILE, LEADER_EPOCH_FILE
from tidelog.common.errors import KafkaStorageError
from tidelog.common.record.batch import decode_batches, encode_batch, read_header, restamp

from .conftest import OpenLog, read_all, records_of, wall_clock


def _values(start: int, count: int) -> list[bytes]:
    return [b"value-%08d" % (start + index) for index in range(count)]


def _fill(partition_log: PartitionLog, batches: int, per_batch: int = 4) -> None:
    for number in range(batches):
        partition_log.append_as_leader(
            encode_batch(_values(number * per_batch, per_batch), timestamps=1000 + number), leader_epoch=0
        )


def _crash(partition_log: PartitionLog) -> None:
    partition_log.close_without_flush()


def _history_writes(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The epoch-history files written from now on (each path, as written)."""
    written: list[Path] = []
    real_write = leader_epoch_cache.write_checkpoint
    monkeypatch.setattr(
        leader_epoch_cache,
        "write_checkpoint",
        lambda path, entries, *, sync=True: (written.append(path), real_write(path, entries, sync=sync))[1],
    )
    return written


def _segment_file(directory: Path, base: int, suffix: str = ".log") -> Path:
    return directory / f"{base:020d}{suffix}"


def test_torn_tail_is_truncated_to_the_last_whole_batch(open_log: OpenLog, tmp_path: Path) -> None:
    partition_log = open_log()
    _fill(partition_log, 10)
    size = partition_log.size_bytes
    _crash(partition_log)
    os.truncate(_segment_file(tmp_path / "topic-0", 0), size - 7)
    recovered = open_log()
    assert recovered.log_end_offset == 36
    assert [value for _, _, value in records_of(read_all(recovered))] == _values(0, 36)
    assert os.path.getsize(_segment_file(tmp_path / "topic-0", 0)) < size - 7


def test_corrupt_byte_in_the_tail_truncates_from_that_batch(open_log: OpenLog, tmp_path: Path) -> None:
    partition_log = open_log()
    _fill(partition_log, 10)
    batch_size = read_header(partition_log.read(0, 100)).size
    _crash(partition_log)
    path = _segment_file(tmp_path / "topic-0", 0)
    data = bytearray(path.read_bytes())
    data[batch_size * 6 + 40] ^= 0x01  # inside batch 7 (offsets 24..27)
    path.write_bytes(data)
    recovered = open_log()
    assert recovered.log_end_offset == 24
    assert len(records_of(read_all(recovered))) == 24


def test_segments_after_a_torn_one_are_dropped(open_log: OpenLog, tmp_path: Path) -> None:
    partition_log = open_log(segment_bytes=4096)
    _fill(partition_log, 200)
    segments = partition_log.segments()
    assert len(segments) >= 3
    _crash(partition_log)
    middle = segments[1]
    os.truncate(middle.log_path, middle.size - 5)
    recovered = open_log(segment_bytes=4096)
    assert len(recovered.segments()) == 2
    assert recovered.log_end_offset < segments[2].base_offset
    values = [value for _, _, value in records_of(read_all(recovered))]
    assert values == _values(0, len(values))


def test_clean_shutdown_skips_recovery_but_a_crash_does_not(open_log: OpenLog, tmp_path: Path) -> None:
    partition_log = open_log()
    _fill(partition_log, 5)
    partition_log.close()
    assert (tmp_path / "topic-0" / CLEAN_SHUTDOWN_FILE).exists()
    reopened = open_log()
    assert not (tmp_path / "topic-0" / CLEAN_SHUTDOWN_FILE).exists()  # until the next clean close
    assert reopened.log_end_offset == 20


@pytest.mark.parametrize("damage", ["missing", "garbage", "not-growing", "past-the-end", "partial-entry"])
def test_damaged_indexes_are_rebuilt(open_log: OpenLog, tmp_path: Path, damage: str) -> None:
    partition_log = open_log(index_interval_bytes=64)
    _fill(partition_log, 50)
    partition_log.close()
    index = _segment_file(tmp_path / "topic-0", 0, ".index")
    entries = index.read_bytes()
    assert len(entries) >= 16
    if damage == "missing":
        index.unlink()
    elif damage == "garbage":
        index.write_bytes(os.urandom(len(entries)))
    elif damage == "not-growing":
        index.write_bytes(entries[8:16] + entries[0:8] + entries[16:])
    elif damage == "past-the-end":
        index.write_bytes(entries + (10_000).to_bytes(4, "little") + (10**8).to_bytes(4, "little"))
    else:
        index.write_bytes(entries[:-3])
    _segment_file(tmp_path / "topic-0", 0, ".timeindex").write_bytes(b"\x01\x02\x03")
    reopened = open_log(index_interval_bytes=64)
    assert index.read_bytes() == entries  # rebuilt identical to the original
    for offset in range(0, 200, 3):
        header = read_header(reopened.read(offset, 10))
        assert header.base_offset <= offset <= header.last_offset
    assert reopened.offset_for_timestamp(1020) == (80, 1020)


def test_garbage_segment_file_does_not_crash_open(open_log: OpenLog, tmp_path: Path) -> None:
    folder = tmp_path / "topic-0"
    folder.mkdir()
    _segment_file(folder, 0).write_bytes(os.urandom(5000))
    _segment_file(folder, 0, ".index").write_bytes(os.urandom(77))
    partition_log = open_log()
    assert partition_log.log_end_offset == 0
    assert partition_log.append_as_leader(encode_batch([b"a"]), leader_epoch=0).first_offset == 0


def test_crash_during_compaction_swap_completes_or_discards(open_log: OpenLog, tmp_path: Path) -> None:
    folder = tmp_path / "topic-0"
    partition_log = open_log()
    _fill(partition_log, 3)
    partition_log.close()
    # A cleaned copy that was renamed to .swap (committed) replaces the original on open ...
    replacement = encode_batch([b"kept"], offset_deltas=[11], last_offset_delta=11)
    Path(str(_segment_file(folder, 0)) + ".swap").write_bytes(replacement)
    # ... while a .cleaned copy (not yet committed) is thrown away.
    Path(str(_segment_file(folder, 0)) + ".cleaned").write_bytes(b"half-written")
    reopened = open_log()
    assert records_of(read_all(reopened)) == [(11, None, b"kept")]
    assert sorted(name for name in os.listdir(folder) if "swap" in name or "cleaned" in name) == []


# ---- the property: whatever a crash leaves, the recovered log is a prefix --------------------


@st.composite
def crash_scenarios(draw: st.DrawFn) -> dict[str, object]:
    operations = draw(
        st.lists(
            st.one_of(
                st.tuples(st.just("append"), st.integers(1, 20), st.integers(0, 300)),
                st.just(("roll",)),
                st.just(("flush",)),
            ),
            min_size=1,
            max_size=40,
        )
    )
    return {
        "operations": operations,
        "damage": draw(st.sampled_from(["truncate", "flip", "zero-tail", "none"])),
        "damage_at": draw(st.floats(0, 1)),
        "index_damage": draw(st.sampled_from(["none", "delete", "garbage"])),
        "segment_bytes": draw(st.sampled_from([4096, 16384, 1 << 20])),
        "seed": draw(st.integers(0, 2**32)),
    }


@given(crash_scenarios())
def test_recovered_log_is_a_prefix_of_what_was_written(scenario: dict[str, object]) -> None:
    rng = random.Random(scenario["seed"])  # type: ignore[arg-type]
    config = LogConfig.from_configs({"segment.bytes": scenario["segment_bytes"], "index.interval.bytes": 256})
    with tempfile.TemporaryDirectory() as temporary:
        folder = Path(temporary) / "topic-0"
        clock = wall_clock()
        partition_log = PartitionLog.open(folder, config, clock=clock.millis)
        written: list[tuple[int, bytes]] = []
        flushed_size: dict[int, int] = {}  # segment base → bytes fsynced by an explicit flush
        for operation in scenario["operations"]:  # type: ignore[attr-defined]
            if operation[0] == "append":
                _, count, size = operation
                values = [rng.randbytes(size) for _ in range(count)]
                info = partition_log.append_as_leader(encode_batch(values, timestamps=clock.millis()), leader_epoch=0)
                written.extend(zip(range(info.first_offset, info.last_offset + 1), values, strict=True))
                clock.advance_ms(1)
            elif operation[0] == "roll":
                partition_log.roll()
            else:
                partition_log.flush()
                flushed_size = {segment.base_offset: segment.size for segment in partition_log.segments()}
            for sealed in partition_log.segments()[:-1]:  # a roll fsyncs the segment it seals
                flushed_size[sealed.base_offset] = sealed.size
        segments = partition_log.segments()
        durable = max(partition_log.recovery_point, segments[-1].base_offset)
        partition_log.close_without_flush()

        # Damage only what a crash can: bytes past the last fsync of their segment.
        victims = [segment for segment in segments if segment.size > flushed_size.get(segment.base_offset, 0)]
        if victims and scenario["damage"] != "none":
            victim = victims[int(scenario["damage_at"] * (len(victims) - 1))]  # type: ignore[operator]
            floor = flushed_size.get(victim.base_offset, 0)
            position = floor + int(scenario["damage_at"] * (victim.size - floor - 1))  # type: ignore[operator]
            data = bytearray(victim.log_path.read_bytes())
            if scenario["damage"] == "truncate":
                del data[position:]
            elif scenario["damage"] == "flip":
                data[position] ^= 1 << rng.randrange(8)
            else:
                data[position:] = bytes(len(data) - position)
            victim.log_path.write_bytes(data)
        for segment in segments:  # indexes are never trusted blindly: any of them may be lost
            if scenario["index_damage"] == "delete":
                segment.offset_index.path.unlink(missing_ok=True)
            elif scenario["index_damage"] == "garbage" and segment.offset_index.path.exists():
                segment.offset_index.path.write_bytes(rng.randbytes(24))

        recovered = PartitionLog.open(folder, config, clock=clock.millis)
        try:
            got = [(offset, value) for offset, _, value in records_of(read_all(recovered))]
            assert got == written[: len(got)], "recovered log is not a prefix of what was written"
            assert len(got) >= sum(1 for offset, _ in written if offset < durable), "lost fsynced records"
            assert recovered.log_end_offset == (got[-1][0] + 1 if got else 0)
            for offset, _ in got:
                header = read_header(recovered.read(offset, 1))
                assert header.base_offset <= offset <= header.last_offset
            # and it accepts appends right after the recovered end
            info = recovered.append_as_leader(encode_batch([b"after"]), leader_epoch=1)
            assert info.first_offset == recovered.log_end_offset - 1
        finally:
            recovered.close_without_flush()


def test_bit_rot_in_a_batch_header_the_producer_state_replays_does_not_crash_the_open(tmp_path: Path) -> None:
    # Found by the fuzzing test below: a clean log whose producer snapshots are gone is replayed
    # from its segments, which a clean open loads by their indexes without validating. A damaged
    # batch length there raised out of the open. The open goes on; a read there reports the rot.
    config = LogConfig.from_configs({"segment.bytes": 4096, "index.interval.bytes": 128})
    folder = tmp_path / "topic-0"
    partition_log = PartitionLog.open(folder, config, clock=wall_clock().millis)
    _fill(partition_log, 120)
    partition_log.update_high_watermark(partition_log.log_end_offset)
    partition_log.close()
    for snapshot in folder.glob("*.snapshot"):
        snapshot.unlink()
    damaged = sorted(folder.glob("*.log"))[-1]
    base = int(damaged.stem)
    data = bytearray(damaged.read_bytes())
    data[8:12] = b"\x7f\xff\xff\xff"  # the first batch's length: past the segment's end
    damaged.write_bytes(data)
    recovered = PartitionLog.open(folder, config, clock=wall_clock().millis)
    try:
        assert recovered.log_end_offset == 480
        assert records_of(decode_batches(recovered.read(base - 4, 1 << 20)))[0][0] == base - 4  # before the rot: served
        with pytest.raises(KafkaStorageError):
            read_all(recovered, base)
    finally:
        recovered.close_without_flush()


@given(
    st.lists(st.tuples(st.integers(0, 10**6), st.binary(min_size=1, max_size=64)), min_size=1, max_size=8),
    st.booleans(),
)
def test_any_damage_anywhere_never_crashes_open_or_serves_bad_data(
    damages: list[tuple[int, bytes]], clean: bool
) -> None:
    config = LogConfig.from_configs({"segment.bytes": 4096, "index.interval.bytes": 128})
    with tempfile.TemporaryDirectory() as temporary:
        folder = Path(temporary) / "topic-0"
        partition_log = PartitionLog.open(folder, config, clock=wall_clock().millis)
        _fill(partition_log, 120)
        partition_log.update_high_watermark(partition_log.log_end_offset)
        if clean:
            partition_log.close()
        else:
            partition_log.close_without_flush()
        files = sorted(folder.iterdir())
        for where, garbage in damages:  # overwrite bytes in any file: segments, indexes, checkpoints
            path = files[where % len(files)]
            data = bytearray(path.read_bytes())
            position = where % (len(data) + 1)
            data[position : position + len(garbage)] = garbage
            path.write_bytes(data)
        recovered = PartitionLog.open(folder, config, clock=wall_clock().millis)
        try:
            offset = recovered.log_start_offset
            while offset < recovered.log_end_offset:
                try:
                    batches = read_all(recovered, offset)
                except KafkaStorageError:  # bit rot in flushed data: reported, never served
                    offset += 1
                    continue
                for batch in batches:  # whatever is served decodes and is what was written
                    for record_offset, value in zip(batch.offsets, batch.values, strict=True):
                        assert value == b"value-%08d" % record_offset
                break
        finally:
            recovered.close_without_flush()


def _stamped(values: list[bytes], base_offset: int, leader_epoch: int) -> bytes:
    """A batch as a leader stored it: offsets and its epoch assigned (what a follower appends)."""
    data = bytearray(encode_batch(values, timestamps=1000))
    restamp(memoryview(data), base_offset=base_offset, partition_leader_epoch=leader_epoch, log_append_time=None)
    return bytes(data)


def test_a_follower_s_epoch_history_survives_a_crash(open_log: OpenLog) -> None:
    # Issue 12: followers kept new epochs in memory until a flush, so after kill -9 a log holding
    # five epochs could come back with none, and truncation after the restart went wrong. The
    # history is written before any batch of a new epoch.
    partition_log = open_log()
    for epoch, base in ((1, 0), (3, 4), (4, 8)):
        partition_log.append_as_follower(_stamped(_values(base, 4), base, epoch))
    _crash(partition_log)
    recovered = open_log()
    assert recovered.leader_epochs.entries() == [(1, 0), (3, 4), (4, 8)]
    assert recovered.end_offset_for_epoch(3) == (3, 8)


def test_epochs_missing_from_the_checkpoint_are_recovered_from_the_log(open_log: OpenLog, tmp_path: Path) -> None:
    # The history lags the data until a flush (ADR 0030), as it does in a log an older version
    # wrote. Recovery assigns the epochs the unflushed batches carry, as Kafka's recovery does.
    partition_log = open_log()
    partition_log.append_as_follower(_stamped(_values(0, 4), 0, 1))
    partition_log.flush()
    partition_log.append_as_follower(_stamped(_values(4, 4), 4, 2))
    partition_log.append_as_follower(_stamped(_values(8, 4), 8, 5))
    _crash(partition_log)
    write_checkpoint(tmp_path / "topic-0" / LEADER_EPOCH_FILE, [(1, 0)])  # as the old code left it
    recovered = open_log()
    assert recovered.leader_epochs.entries() == [(1, 0), (2, 4), (5, 8)]


def test_a_recovered_first_segment_does_not_make_open_scan_trusted_later_ones() -> None:
    """Found by the property above: after a clean shutdown, bit rot in segment 0 (index and data)
    sends it through recovery; open then scanned every later segment for leader epochs, and bit rot
    in a later segment's batch length (one its intact indexes vouch for) crashed the open. Only
    recovered segments are scanned now; the later damage is for reads to report."""
    config = LogConfig.from_configs({"segment.bytes": 4096, "index.interval.bytes": 128})
    with tempfile.TemporaryDirectory() as temporary:
        folder = Path(temporary) / "topic-0"
        partition_log = PartitionLog.open(folder, config, clock=wall_clock().millis)
        _fill(partition_log, 120)
        partition_log.update_high_watermark(partition_log.log_end_offset)
        partition_log.close()
        segments = sorted(folder.glob("*.log"))
        assert len(segments) >= 3
        (folder / segments[0].with_suffix(".index").name).write_bytes(b"bad")  # index unusable: rebuilt
        first = bytearray(segments[0].read_bytes())
        first[2000] ^= 0xFF  # a CRC fails while rebuilding: segment 0 is recovered (cut at that batch)
        segments[0].write_bytes(first)
        second = bytearray(segments[1].read_bytes())
        second[8:12] = (0x7FFFFFFF).to_bytes(4, "big")  # the first batch's length overruns the file
        segments[1].write_bytes(second)

        recovered = PartitionLog.open(folder, config, clock=wall_clock().millis)
        try:
            assert recovered.log_start_offset == 0
            assert recovered.log_end_offset == partition_log.log_end_offset  # later segments kept
            with pytest.raises(KafkaStorageError):
                read_all(recovered, int(segments[1].stem))  # the rot is reported, never served
        finally:
            recovered.close_without_flush()


def test_a_flush_syncs_the_epoch_history_before_the_recovery_point(
    open_log: OpenLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A new epoch's history is not written with its batches (ADR 0030); once the recovery point
    # passes them, recovery no longer reads their epochs back, so the flush writes it synced first.
    done: list[str] = []
    real_sync, real_write = checkpoint.sync_file, checkpoint.write_checkpoint

    def sync_file(path: Path) -> None:
        done.append(f"sync {path.name}")
        real_sync(path)

    def write_checkpoint(path: Path, entries: list[tuple[int, ...]], *, sync: bool = True) -> None:
        done.append(f"write {path.name}{'' if sync else ' unsynced'}")
        real_write(path, entries, sync=sync)

    monkeypatch.setattr(leader_epoch_cache, "sync_file", sync_file)
    monkeypatch.setattr(leader_epoch_cache, "write_checkpoint", write_checkpoint)
    monkeypatch.setattr(offset_checkpoints, "write_checkpoint", write_checkpoint)
    log_ = open_log()
    done.clear()  # (the open's checkpoints)
    log_.append_as_follower(_stamped(_values(0, 4), 0, 1))
    log_.append_as_follower(_stamped(_values(4, 4), 4, 3))
    assert done == []  # nothing for the new epochs' batches
    log_.flush()
    assert done[:2] == [f"write {LEADER_EPOCH_FILE}", "write recovery-point-offset-checkpoint"]
    assert read_checkpoint(log_.leader_epochs.path, fields=2) == [(1, 0), (3, 4)]


def test_a_two_phase_close_leaves_the_marker_only_in_its_second_half(
    open_log: OpenLog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A broker closing thousands of logs writes them out unsynced, syncs the file system once,
    # then moves checkpoints and marker (ReplicaManager.close). The first half fsyncs nothing.
    partition_log = open_log()
    _fill(partition_log, 10)
    partition_log.assign_leader_epoch(3)  # an epoch history written without sync, as a new leader's
    partition_log.append_as_leader(encode_batch(_values(40, 4), timestamps=2000), leader_epoch=3)
    fsyncs: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda descriptor: (fsyncs.append(descriptor), real_fsync(descriptor))[1])
    partition_log.close(sync=False)
    assert not fsyncs
    directory = tmp_path / "topic-0"
    assert not (directory / CLEAN_SHUTDOWN_FILE).exists()  # no promise before the data is durable
    checkpoint.sync_filesystems([directory.parent])
    partition_log.finish_close()
    assert not fsyncs and (directory / CLEAN_SHUTDOWN_FILE).exists()
    monkeypatch.undo()
    reopened = open_log()
    assert not (directory / CLEAN_SHUTDOWN_FILE).exists()  # consumed by the open, as after any clean close
    assert reopened.log_end_offset == 44
    assert [value for _, _, value in records_of(read_all(reopened))] == _values(0, 44)
    assert reopened.leader_epochs.entries() == [(0, 0), (3, 40)]


def test_a_stop_cut_between_the_two_halves_recovers_as_after_a_crash(open_log: OpenLog, tmp_path: Path) -> None:
    partition_log = open_log()
    _fill(partition_log, 10)
    partition_log.close(sync=False)  # the process dies before the file system's sync
    reopened = open_log()
    assert reopened.log_end_offset == 40
    assert [value for _, _, value in records_of(read_all(reopened))] == _values(0, 40)


def test_opening_after_a_crash_syncs_nothing_and_keeps_the_recovery_point(
    open_log: OpenLog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A broker back from kill -9 opens thousands of logs: an fsync each took seconds. What recovery
    # validated is not durable until a flush, so the recovery point stays where it was (as Kafka's
    # LogLoader) and a second crash recovers the same segment again.
    partition_log = open_log(flush_messages=8)
    _fill(partition_log, 3)  # 12 records: flushed at 8, 4 unflushed
    assert partition_log.recovery_point == 8
    partition_log.assign_leader_epoch(2)  # an epoch with no batch: forgotten by the open
    _crash(partition_log)
    fsyncs: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda descriptor: (fsyncs.append(descriptor), real_fsync(descriptor))[1])
    reopened = open_log(flush_messages=8)
    assert not fsyncs
    assert reopened.recovery_point == 8
    assert reopened.log_end_offset == 12
    assert reopened.leader_epochs.entries() == [(0, 0)]
    assert read_checkpoint(tmp_path / "topic-0" / LEADER_EPOCH_FILE, fields=2) == [(0, 0)]
    monkeypatch.undo()
    _crash(reopened)
    again = open_log(flush_messages=8)
    assert again.recovery_point == 8 and again.log_end_offset == 12
    again.flush()
    assert again.recovery_point == 12
    assert [value for _, _, value in records_of(read_all(again))] == _values(0, 12)


def test_a_new_epoch_is_written_by_the_flush_and_recovered_from_the_log_after_a_crash(
    open_log: OpenLog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Taking thousands of leaderships at once, or a 10,000-partition topic's first produce, wrote a
    # file each while producers waited (ADR 0030). A crash before the flush loses nothing: the open
    # recovers the batches from the recovery point on and assigns their epochs again, and writes no
    # history file for them (a file each at a 10,000-log restart).
    history = tmp_path / "topic-0" / LEADER_EPOCH_FILE
    partition_log = open_log()
    _fill(partition_log, 1)  # epoch 0 at 0
    partition_log.flush()
    partition_log.assign_leader_epoch(5)
    partition_log.append_as_leader(encode_batch(_values(4, 4), timestamps=3000), leader_epoch=5)
    partition_log.append_as_follower(_stamped(_values(8, 4), 8, 7))
    assert partition_log.leader_epochs.entries() == [(0, 0), (5, 4), (7, 8)]
    assert read_checkpoint(history, fields=2) == [(0, 0)]  # nothing written for the new epochs
    _crash(partition_log)
    written = _history_writes(monkeypatch)
    reopened = open_log()
    assert reopened.leader_epochs.entries() == [(0, 0), (5, 4), (7, 8)]
    assert reopened.log_end_offset == 12 and reopened.recovery_point == 4
    assert written == [] and read_checkpoint(history, fields=2) == [(0, 0)]
    _crash(reopened)  # a second crash before any flush: recovered again
    again = open_log()
    assert again.leader_epochs.entries() == [(0, 0), (5, 4), (7, 8)]
    again.flush()
    assert read_checkpoint(history, fields=2) == [(0, 0), (5, 4), (7, 8)]


def test_an_open_writes_the_history_cut_to_what_the_log_kept(open_log: OpenLog, tmp_path: Path) -> None:
    # A crash lost the tail an epoch began in: the file loses that epoch at the open, though the
    # epochs recovered from the log are left to the next flush.
    history = tmp_path / "topic-0" / LEADER_EPOCH_FILE
    partition_log = open_log()
    _fill(partition_log, 2)  # epoch 0: 0..7
    partition_log.flush()
    _crash(partition_log)
    write_checkpoint(history, [(0, 0), (4, 8)])  # epoch 4 at 8: its batch never reached the disk
    reopened = open_log()
    assert reopened.leader_epochs.entries() == [(0, 0)]
    assert read_checkpoint(history, fields=2) == [(0, 0)]


def test_a_close_does_not_write_a_leadership_no_batch_carries(
    open_log: OpenLog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A broker closing after thousands of leaderships moved wrote a history file for each; an
    # epoch no batch carries is dropped by the next open anyway.
    history = tmp_path / "topic-0" / LEADER_EPOCH_FILE
    partition_log = open_log()
    _fill(partition_log, 1)
    partition_log.flush()  # epoch 0's history on disk
    partition_log.assign_leader_epoch(7)
    written = _history_writes(monkeypatch)
    partition_log.close()
    assert written == [] and read_checkpoint(history, fields=2) == [(0, 0)]
    reopened = open_log()
    assert reopened.leader_epochs.entries() == [(0, 0)]
    reopened.assign_leader_epoch(8)
    reopened.append_as_leader(encode_batch(_values(4, 4), timestamps=3000), leader_epoch=8)
    reopened.close()
    assert written == [history] and read_checkpoint(history, fields=2) == [(0, 0), (8, 4)]
