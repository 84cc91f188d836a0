"""Stopping a child process the same way everywhere: SIGTERM, a bounded wait, then SIGKILL."""

from __future__ import annotations

import subprocess
from typing import Final

__all__ = ["stop"]

STOP_TIMEOUT_S: Final = 10.0


def stop(process: subprocess.Popen[bytes] | None, timeout_s: float = STOP_TIMEOUT_S) -> None:
    """Ask `process` to stop and wait for it; kill it if it has not within `timeout_s`."""
    if process is None or process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
