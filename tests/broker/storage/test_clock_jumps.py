"""A broker's wall clock jumping backwards and forwards (issue 19): offsets stay dense and
monotonic, LogAppendTime stamps what the clock said, the time index never goes back, lookups by
time stay consistent, segment.ms does not roll on a backward jump, and retention never deletes the
active segment nor anything because the clock went back. A forward jump ages everything, as it
does in Kafka (docs/guarantees.md)."""

from __future__ import annotations

from tests.broker.storage.conftest import FakeClock, OpenLog, read_all
from tidelog.common.record.batch import encode_batch

HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS


def _append(partition_log, clock: FakeClock, number: int) -> int:
    batch = encode_batch([b"%06d" % number + b"x" * 200], timestamps=clock.now_ms)
    return partition_log.append_as_leader(batch, leader_epoch=0).first_offset


def test_offsets_timestamps_index_and_retention_stay_sane_as_the_clock_jumps(
    open_log: OpenLog, clock: FakeClock
) -> None:
    partition_log = open_log(
        message_timestamp_type="LogAppendTime", segment_bytes=4096, segment_ms=HOUR_MS, retention_ms=DAY_MS
    )
    start_ms = clock.now_ms
    # Minutes apart, with jumps: a day back, three days forward, two days back, an hour back.
    schedule = [60_000] * 40 + [-DAY_MS] + [60_000] * 40 + [3 * DAY_MS] + [60_000] * 40 + [-2 * DAY_MS]
    schedule += [60_000] * 40 + [-HOUR_MS] + [60_000] * 40
    offsets, stamps = [], []
    for number, step in enumerate(schedule):
        clock.advance_ms(step)
        offsets.append(_append(partition_log, clock, number))
        stamps.append(clock.now_ms)
        if step < 0:
            segments_before = len(partition_log.segments())
            clock.advance_ms(1)
            offsets.append(_append(partition_log, clock, 10_000 + number))  # right after a backward jump
            stamps.append(clock.now_ms)
            # No roll because "the segment is older than segment.ms": the clock went back, not forward.
            assert len(partition_log.segments()) <= segments_before + 1
    assert offsets == list(range(len(offsets)))  # dense, monotonic, whatever the clock did
    batches = read_all(partition_log)
    assert [batch.timestamps[0] for batch in batches] == stamps  # LogAppendTime: the broker's clock, as Kafka
    indexed = 0
    for segment in partition_log.segments():
        times, positions = list(segment.time_index.keys), list(segment.time_index.values)
        assert times == sorted(set(times)), "the time index's timestamps only grow"
        assert positions == sorted(positions), "and its offsets never go back"
        indexed += len(times)
    assert indexed > 0
    # A lookup by time returns a record at or after that time, or nothing.
    for target in (start_ms, start_ms + 30 * 60_000, max(stamps), max(stamps) + 1):
        found = partition_log.offset_for_timestamp(target)
        if found is not None:
            offset, timestamp = found
            assert timestamp >= target and 0 <= offset < len(offsets)
    # The clock back by two days: retention deletes nothing it kept before (nothing looks older).
    before = partition_log.log_start_offset
    clock.now_ms = start_ms
    partition_log.apply_retention()
    assert partition_log.log_start_offset == before
    # Far forward: everything is old, yet the active segment and the log end stay.
    clock.now_ms = max(stamps) + 10 * DAY_MS
    partition_log.apply_retention()
    assert partition_log.log_end_offset == len(offsets)
    assert partition_log.segments()[-1].base_offset <= len(offsets) - 1
    assert _append(partition_log, clock, 99_999) == len(offsets)  # appends go on where they were
