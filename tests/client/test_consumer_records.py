"""What a poll returns, without a cluster: runs cut from fetched batches at the position, split and
taken up to max.poll.records, the per-record form built from them, and the offsets a commit stores."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tidelog.client import TopicPartition
from tidelog.client.consumer_records import (
    ConsumerRecord,
    FetchedPartition,
    RecordRun,
    first_offsets,
    next_offsets,
    records_of,
    runs_of,
    take,
)
from tidelog.common.record.batch import decode_batches, encode_batch

A, B, C = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("u", 0)


def _run(tp: TopicPartition, first: int, count: int) -> RecordRun:
    offsets = list(range(first, first + count))
    return RecordRun(tp, offsets, [0] * count, [None] * count, [b"v%d" % o for o in offsets], [()] * count)


def test_commit_offsets_are_one_past_each_partitions_last_record() -> None:
    runs = [_run(A, 5, 1), _run(A, 6, 1), _run(B, 0, 1), _run(C, 41, 2)]
    assert next_offsets(runs) == {A: 7, B: 1, C: 43}
    assert first_offsets(runs) == {A: 5, B: 0, C: 41}
    assert next_offsets([]) == {}


def test_runs_start_at_the_position_inside_the_first_batch() -> None:
    data = (
        encode_batch([b"a", b"b", b"c"], keys=[b"k", None, b"m"], base_offset=10, timestamps=[1, 2, 3])
        + encode_batch([b"d"], base_offset=13, headers=[(("h", b"1"),)])
        + encode_batch([b"e"], base_offset=14)
    )
    fetched = {A: FetchedPartition(11, decode_batches(data)), B: FetchedPartition(15, decode_batches(data))}
    runs = runs_of(fetched)
    assert [(run.partition, run.offsets) for run in runs] == [(A, [11, 12]), (A, [13]), (A, [14])]  # B: all below
    assert records_of(runs)[:2] == [
        ConsumerRecord("t", 0, 11, 2, None, b"b", ()),
        ConsumerRecord("t", 0, 12, 3, b"m", b"c", ()),
    ]
    assert records_of(runs)[2].headers == (("h", b"1"),)


@given(st.lists(st.integers(1, 5), min_size=1, max_size=6), st.integers(1, 20))
def test_max_poll_records_takes_records_in_order_and_keeps_the_rest(sizes: list[int], limit: int) -> None:
    runs, offset = [], 0
    for size in sizes:
        runs.append(_run(A, offset, size))
        offset += size
    taken, rest = take(list(runs), limit)
    assert sum(map(len, taken)) == min(limit, offset)
    assert records_of(taken) + records_of(rest) == records_of(runs)
    assert all(len(run) > 0 for run in rest)
