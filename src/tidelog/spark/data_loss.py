"""Where a micro-batch starts reading each partition, and the data loss Spark's Kafka source
reports on the way (KafkaOffsetReader.getOffsetRangesFromResolvedOffsets), plus a topic id check
Spark's source cannot make:

- a partition the previous batch read is gone ("... are gone");
- a partition new since the previous batch does not start at offset 0 ("Added partition ...");
- a topic was deleted and re-created (its topic id changed) — the previous offsets are of the
  old topic;
- a partition's end is below where the batch would start ("offset was changed from ... to ...");
- the start was deleted by retention (below the log start).

With failOnDataLoss=true each is a `DataLossError` naming the partition and offsets; with false it
is logged and the partition is read from the earliest offset available.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Set

from tidelog.client import TopicPartition

__all__ = ["DataLossError", "Snapshot", "plan_starts"]

log = logging.getLogger("tidelog.spark")

FAIL_HINT = (
    " Some data may have been lost: records aged out by retention, or a topic deleted before all of it"
    ' was processed. If you don\'t want your query to fail on such cases, set the option "failOnDataLoss"'
    ' to "false".'
)


class DataLossError(RuntimeError):
    """Records a query was to read are gone and failOnDataLoss is true."""


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """What the cluster says now of the partitions a query reads."""

    earliest: Mapping[TopicPartition, int]
    latest: Mapping[TopicPartition, int]
    topic_ids: Mapping[str, str]


def _report(message: str, fail: bool | None) -> None:
    if fail is None:  # planning quietly (latestOffset): the batch's plan reports it
        return
    if fail:
        raise DataLossError(message + FAIL_HINT)
    log.warning("%s Reading on from the earliest offset available (failOnDataLoss=false).", message)


def plan_starts(
    begun: Mapping[TopicPartition, int],
    ends: Mapping[TopicPartition, int],
    now: Snapshot,
    recreated: Set[str],
    *,
    fail: bool | None,
) -> dict[TopicPartition, int]:
    """Where each partition of `ends` starts: `begun` (the previous batch's end) unless data was
    lost. `fail` None plans without reporting."""
    gone = sorted(set(begun) - set(ends))
    if gone:
        _report(f"Partitions {', '.join(map(str, gone))} are gone. Some data may have been missed.", fail)
    starts: dict[TopicPartition, int] = {}
    for tp in sorted(ends):
        earliest = now.earliest[tp]
        if tp not in begun:
            if earliest != 0:
                _report(
                    f"Added partition {tp} starts from {earliest} instead of 0. Some data may have been missed.",
                    fail,
                )
            starts[tp] = earliest
            continue
        start = begun[tp]
        if tp.topic in recreated:
            _report(
                f"Topic {tp.topic} was deleted and re-created (its topic id changed): partition {tp}'s offset "
                f"{start} is of the old topic.",
                fail,
            )
            start = earliest
        elif ends[tp] < start:
            _report(
                f"Partition {tp}'s offset was changed from {start} to {ends[tp]}, some data may have been missed.",
                fail,
            )
            start = earliest
        elif start < earliest:
            _report(f"Partition {tp}: offsets {start}..{earliest - 1} are gone (deleted by retention).", fail)
            start = earliest
        starts[tp] = start
    return starts
