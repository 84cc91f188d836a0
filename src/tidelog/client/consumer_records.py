"""What a poll returns: records one by one (`ConsumerRecord`), or in bulk as runs of columns.

A `RecordRun` is consecutive records of one partition, held as the decoded batch's columns (or
slices of them): no object per record. `poll_runs()` returns them, and the per-record forms are
built from them, so both say the same thing; the REST gateway renders a run's columns with bulk
operations and never builds a record object.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
from collections.abc import Iterable, Mapping

from tidelog.client.cluster_metadata import TopicPartition
from tidelog.common.record.batch import Headers, RecordBatch

__all__ = [
    "ConsumerRecord",
    "FetchedPartition",
    "OffsetRange",
    "RecordRun",
    "StoredPartition",
    "first_offsets",
    "next_offsets",
    "records_of",
    "runs_of",
    "take",
]


@dataclasses.dataclass(frozen=True, slots=True)
class ConsumerRecord:
    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: Headers


@dataclasses.dataclass(frozen=True, slots=True)
class FetchedPartition:
    """Stored batches fetched for one partition; records below `start_offset` were consumed before."""

    start_offset: int
    batches: list[RecordBatch]


@dataclasses.dataclass(frozen=True, slots=True)
class OffsetRange:
    """A partition's offsets as its leader holds them: the first readable, the high watermark
    (read_uncommitted's end) and the last stable offset (read_committed's end)."""

    log_start_offset: int
    high_watermark: int
    last_stable_offset: int


@dataclasses.dataclass(frozen=True, slots=True)
class StoredPartition:
    """One partition's fetched batches as the broker sent them (bytes, back to back, not decoded):
    for readers that decode columns in bulk themselves (the Spark source builds Arrow arrays from
    them). Records below `start_offset` were consumed before."""

    start_offset: int
    record_batches: bytes


@dataclasses.dataclass(frozen=True, slots=True)
class RecordRun:
    """Consecutive records of one partition, as columns (one list per field, same length, offsets
    ascending and never empty)."""

    partition: TopicPartition
    offsets: list[int]
    timestamps: list[int]
    keys: list[bytes | None]
    values: list[bytes | None]
    headers: list[Headers]

    def __post_init__(self) -> None:
        count = len(self.offsets)
        assert count > 0, "a run holds at least one record"
        assert len(self.timestamps) == len(self.keys) == len(self.values) == len(self.headers) == count
        assert self.offsets[0] <= self.offsets[-1], "offsets ascend"

    def __len__(self) -> int:
        return len(self.offsets)

    @property
    def next_offset(self) -> int:
        """The offset after the run's last record (what committing it stores)."""
        return self.offsets[-1] + 1

    def payload_bytes(self) -> int:
        """Bytes of keys and values together (what `max_bytes` of a REST records GET counts)."""
        return sum(map(len, filter(None, self.keys))) + sum(map(len, filter(None, self.values)))

    def split(self, count: int) -> tuple[RecordRun, RecordRun]:
        """The first `count` records and the rest; both must hold one at least."""
        assert 0 < count < len(self.offsets)
        return self._slice(slice(None, count)), self._slice(slice(count, None))

    def _slice(self, part: slice) -> RecordRun:
        return RecordRun(
            self.partition,
            self.offsets[part],
            self.timestamps[part],
            self.keys[part],
            self.values[part],
            self.headers[part],
        )

    def records(self) -> list[ConsumerRecord]:
        count = len(self.offsets)
        return list(
            map(
                ConsumerRecord,
                itertools.repeat(self.partition.topic, count),
                itertools.repeat(self.partition.partition, count),
                self.offsets,
                self.timestamps,
                self.keys,
                self.values,
                self.headers,
            )
        )


def runs_of(fetched: Mapping[TopicPartition, FetchedPartition]) -> list[RecordRun]:
    """A run per fetched batch (the batch's own lists, not copies), without the records below the
    partition's start: the first batch may begin before the position, as the log serves whole
    batches."""
    runs: list[RecordRun] = []
    for tp, partition in fetched.items():
        start = partition.start_offset
        for batch in partition.batches:
            offsets = batch.offsets
            if not offsets or offsets[-1] < start:
                continue
            run = RecordRun(tp, offsets, batch.timestamps, batch.keys, batch.values, batch.headers)
            if offsets[0] < start:
                _, run = run.split(bisect.bisect_left(offsets, start))
            runs.append(run)
    return runs


def records_of(runs: Iterable[RecordRun]) -> list[ConsumerRecord]:
    return [record for run in runs for record in run.records()]


def next_offsets(runs: Iterable[RecordRun]) -> dict[TopicPartition, int]:
    """The offset after each partition's last record (what committing the runs stores)."""
    return {run.partition: run.next_offset for run in runs}


def first_offsets(runs: Iterable[RecordRun]) -> dict[TopicPartition, int]:
    """Each partition's first offset among the runs (where to seek to read them again)."""
    found: dict[TopicPartition, int] = {}
    for run in runs:
        found.setdefault(run.partition, run.offsets[0])
    return found


def take(runs: list[RecordRun], limit: int) -> tuple[list[RecordRun], list[RecordRun]]:
    """(the first `limit` records of `runs`, a run split at the limit; the rest)."""
    count = 0
    for index, run in enumerate(runs):
        if count + len(run) > limit:
            if count == limit:
                return runs[:index], runs[index:]
            head, rest = run.split(limit - count)
            return [*runs[:index], head], [rest, *runs[index + 1 :]]
        count += len(run)
    return runs, []
