"""The data directory's clean-shutdown list (Kafka's `.kafka_cleanshutdown`, one per log directory):
the log folders a broker's stop closed cleanly, named in one file, so that the stop writes one
file rather than a marker in each of 10,000 log folders (0.3 ms a file here: seconds of a stop).

Read and removed, durably, when the broker starts and before it opens any log: a log this life
opens and appends to must not pass for clean after a crash. Kafka loads every log at its start;
Tidelog opens a log when the controller assigns it, so the file names the folders it vouches for:
those the stop closed, and those the previous list named that this life never opened (still as
that stop left them). A folder's own `.clean-shutdown` (a single log's `close()`: tools, tests) is
honoured as before. A list that does not parse vouches for nothing: every log is recovered.

    <version>
    <number of folders>
    <folder name>            (one a line)
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Final

import structlog

from tidelog.broker.storage.checkpoint import fsync_directory, read_small_file, write_atomically

__all__ = ["CLEAN_SHUTDOWN_LIST_FILE", "CleanShutdown"]

log = structlog.get_logger(__name__)

CLEAN_SHUTDOWN_LIST_FILE: Final = ".clean-shutdown-logs"
_VERSION: Final = 0


class CleanShutdown:
    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / CLEAN_SHUTDOWN_LIST_FILE
        self._clean: set[str] = set()
        self._lock = threading.Lock()  # consumed from the I/O threads that open logs side by side

    def take(self) -> int:
        """Read the list left by the last stop and remove it durably; how many folders it names."""
        data = read_small_file(self.path)
        if data is None:
            return 0
        names = _parse(data)
        if names is None:
            log.warning("clean_shutdown_list_unreadable", path=str(self.path))
            names = set()
        os.unlink(self.path)
        fsync_directory(self.path.parent)  # gone for good before any log of this life changes
        with self._lock:
            self._clean = names
        return len(names)

    def consume(self, folder: str) -> bool:
        """Whether the last stop closed `folder` cleanly; True once (the log is open from then on)."""
        with self._lock:
            if folder in self._clean:
                self._clean.remove(folder)
                return True
            return False

    def write(self, closed: Iterable[str]) -> None:
        """After a stop closed these folders' logs (their data and checkpoints written), name them
        and the folders still vouched for from before. Written without sync: the caller's sync of
        the file system follows (ADR 0023), and a crash before it leaves no list, or a whole one."""
        with self._lock:
            names = sorted(self._clean.union(closed))
        lines = [str(_VERSION), str(len(names)), *names]
        write_atomically(self.path, ("\n".join(lines) + "\n").encode(), sync=False)


def _parse(data: bytes) -> set[str] | None:
    try:
        lines = data.decode("utf-8").splitlines()
        if len(lines) < 2 or int(lines[0]) != _VERSION or int(lines[1]) != len(lines) - 2:
            return None
    except (UnicodeDecodeError, ValueError):
        return None
    return set(lines[2:])
