"""The typed view of a partition log's configs (names and bounds live in tidelog.common.config)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Self

from tidelog.common.config import LOG_CONFIGS, LONG_MAX, parse_configs

__all__ = ["LogConfig"]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class LogConfig:
    segment_bytes: int
    segment_ms: int
    segment_index_bytes: int
    index_interval_bytes: int
    flush_messages: int
    flush_ms: int
    retention_ms: int
    retention_bytes: int
    cleanup_policy: tuple[str, ...]
    delete_retention_ms: int
    min_compaction_lag_ms: int
    min_cleanable_dirty_ratio: float
    max_message_bytes: int
    min_insync_replicas: int
    unclean_leader_election_enable: bool
    message_timestamp_type: str

    @classmethod
    def from_configs(cls, raw: Mapping[str, object] | None = None) -> Self:
        """Build from Kafka-named configs (`{"segment.bytes": "1048576"}`); checks every bound."""
        parsed = parse_configs(raw or {}, LOG_CONFIGS)
        return cls(**{name.replace(".", "_"): value for name, value in parsed.items()})  # type: ignore[arg-type]

    @property
    def flushes_by_time(self) -> bool:
        """Whether flush.ms is set: at its default (Long.MAX_VALUE, Kafka's) time never makes a flush due."""
        return self.flush_ms < LONG_MAX

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy
