"""A partition's log folder (`<log.dirs>/<topic>-<partition>`) and its `partition.metadata` marker:
which topic, by id, the log belongs to, so the log of a deleted topic is never taken for a new
topic's of the same name."""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path
from typing import Final

import structlog

from tidelog.broker.storage import LogConfig, PartitionLog
from tidelog.broker.storage.checkpoint import read_small_file

__all__ = ["PARTITION_METADATA_FILE", "log_folder", "open_partition_log"]

log = structlog.get_logger(__name__)

PARTITION_METADATA_FILE: Final = "partition.metadata"


def log_folder(data_dir: Path, topic: str, partition: int) -> Path:
    return data_dir / f"{topic}-{partition}"


def open_partition_log(
    data_dir: Path,
    topic: str,
    partition: int,
    topic_id: str,
    config: LogConfig,
    *,
    clean: bool = False,
    found: bool = False,
) -> PartitionLog:
    """The partition's log, created when new (the common case: nothing to recover), opened and
    recovered when it exists for this topic id, replaced when it is a former topic's. `found`: the
    caller's listing of `data_dir` holds the folder (a restart's logs: no attempt to create it)."""
    directory = log_folder(data_dir, topic, partition)
    marker = directory / PARTITION_METADATA_FILE
    if not found:
        try:
            partition_log = PartitionLog.create(directory, config)
        except FileExistsError:
            pass
        else:
            _write_marker(marker, topic_id)
            return partition_log
    written = read_small_file(marker)
    stale = written is None or written.decode(errors="replace").strip() != f"topic_id: {topic_id}"
    if stale:
        log.warning("stale_log_replaced", topic=topic, partition=partition)
        with contextlib.suppress(FileNotFoundError):  # `found`, and gone since: nothing to remove
            shutil.rmtree(directory)
    # A stale folder was removed above: open makes it again.
    partition_log = PartitionLog.open(directory, config, clean=clean and not stale, existing=not stale)
    if stale:
        _write_marker(marker, topic_id)
    return partition_log


def _write_marker(marker: Path, topic_id: str) -> None:
    descriptor = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(descriptor, f"topic_id: {topic_id}\n".encode())
    finally:
        os.close(descriptor)
