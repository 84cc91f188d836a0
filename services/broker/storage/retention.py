"""Which old segments retention deletes: by log start offset, `retention.ms` and `retention.bytes`.

Pure function over the segment list; PartitionLog applies the result under its lock. Only a prefix
of the log is ever deleted, and never the active (last) segment.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from tidelog.broker.storage.log_config import LogConfig
from tidelog.broker.storage.segment import LogSegment

__all__ = ["segments_past_retention"]


def segments_past_retention(
    segments: Sequence[LogSegment],
    config: LogConfig,
    *,
    now_ms: int,
    log_start_offset: int,
    start_offset_only: bool = False,
) -> int:
    """How many of the oldest segments to delete.

    `start_offset_only` skips the time and size rules (delete-records acts at once on the start
    offset; time and size wait for the retention pass).
    """
    by_policy = config.delete and not start_offset_only
    remaining_bytes = sum(segment.size for segment in segments)
    count = 0
    for segment, following in itertools.pairwise(segments):  # the last one is active: kept
        below_start = following.base_offset <= log_start_offset
        expired = by_policy and config.retention_ms >= 0 and segment.max_timestamp < now_ms - config.retention_ms
        too_big = by_policy and config.retention_bytes >= 0 and remaining_bytes - segment.size >= config.retention_bytes
        if not (below_start or expired or too_big):
            break
        remaining_bytes -= segment.size
        count += 1
    return count
