"""The files of one partition log's folder `<topic>-<partition>/`, their names, and how an offset
checkpoint among them is read:

    00000000000000000000.log / .index / .timeindex   segments, named by base offset (segment.py)
    replication-offset-checkpoint                     high watermark
    log-start-offset-checkpoint                       log start offset (delete-records, retention)
    recovery-point-offset-checkpoint                  everything below is fsynced
    leader-epoch-checkpoint                           leader epoch → start offset history
    00000000000000001234.snapshot                     idempotent-producer state at that offset
    cleaner-offset-checkpoint                         first offset compaction has not cleaned yet
    .clean-shutdown                                   present only after close(): skip recovery
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Final

import structlog

from tidelog.broker.storage.checkpoint import CorruptCheckpointError, read_checkpoint

__all__ = [
    "CLEANED_SUFFIX",
    "CLEANER_OFFSET_FILE",
    "CLEAN_SHUTDOWN_FILE",
    "HIGH_WATERMARK_FILE",
    "LEADER_EPOCH_FILE",
    "LOG_START_OFFSET_FILE",
    "MAX_RELATIVE_OFFSET",
    "RECOVERY_POINT_FILE",
    "SEGMENT_NAME",
    "SWAP_SUFFIX",
    "parse_log_directory_name",
    "read_offset",
]

log = structlog.get_logger(__name__)

HIGH_WATERMARK_FILE: Final = "replication-offset-checkpoint"
LOG_START_OFFSET_FILE: Final = "log-start-offset-checkpoint"
RECOVERY_POINT_FILE: Final = "recovery-point-offset-checkpoint"
LEADER_EPOCH_FILE: Final = "leader-epoch-checkpoint"
CLEANER_OFFSET_FILE: Final = "cleaner-offset-checkpoint"
CLEAN_SHUTDOWN_FILE: Final = ".clean-shutdown"
SWAP_SUFFIX: Final = ".swap"
CLEANED_SUFFIX: Final = ".cleaned"
MAX_RELATIVE_OFFSET: Final = 2**32 - 1
SEGMENT_NAME = re.compile(r"^(\d{20})\.log$")
DIRECTORY_NAME = re.compile(r"^(?P<topic>[a-zA-Z0-9._-]{1,249})-(?P<partition>\d+)$")


def parse_log_directory_name(name: str) -> tuple[str, int]:
    match = DIRECTORY_NAME.match(name)
    if match is None:
        raise ValueError(f"{name!r} is not a <topic>-<partition> log folder")
    return match["topic"], int(match["partition"])


def read_offset(path: Path) -> int | None:
    """The offset a one-entry checkpoint holds; None when absent, empty or unreadable."""
    try:
        entries = read_checkpoint(path, fields=1)
    except CorruptCheckpointError:
        log.warning("checkpoint_corrupt", path=str(path))
        return None
    return None if not entries else entries[0][0]
