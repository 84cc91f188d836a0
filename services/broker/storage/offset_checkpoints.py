"""The three offsets a partition log keeps in files of their own (Kafka's OffsetCheckpointFile):
recovery point, high watermark and log start offset. Each is rewritten (fsync'd) only when its
value changed since written: a new, empty log writes none (a missing file reads as 0), and a
flush that moved nothing writes nothing."""

from __future__ import annotations

from pathlib import Path

from tidelog.broker.storage.checkpoint import write_checkpoint
from tidelog.broker.storage.log_files import (
    HIGH_WATERMARK_FILE,
    LOG_START_OFFSET_FILE,
    RECOVERY_POINT_FILE,
    read_offset,
)

__all__ = ["OffsetCheckpoints"]


class OffsetCheckpoints:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._written: dict[str, int] = {}  # file → the value it holds (absent: 0; -1: unreadable)

    def load(self, names: list[str]) -> dict[str, int | None]:
        """Read the three from the folder whose listing is `names`, and note what is on disk now
        so unchanged values are not written again. Returns each file's offset, None when absent
        or unreadable."""
        values: dict[str, int | None] = {}
        for name in (RECOVERY_POINT_FILE, HIGH_WATERMARK_FILE, LOG_START_OFFSET_FILE):
            if name not in names:
                values[name] = None
                continue
            value = values[name] = read_offset(self.directory / name)
            self._written[name] = -1 if value is None else value  # -1: unreadable, rewrite it
        return values

    def write(self, *, recovery_point: int, high_watermark: int, log_start_offset: int, sync: bool = True) -> None:
        for name, value in (
            (RECOVERY_POINT_FILE, recovery_point),
            (HIGH_WATERMARK_FILE, high_watermark),
            (LOG_START_OFFSET_FILE, log_start_offset),
        ):
            if self._written.get(name, 0) != value:
                write_checkpoint(self.directory / name, [(value,)], sync=sync)
                self._written[name] = value
