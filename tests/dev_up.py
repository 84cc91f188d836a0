"""`tidelog dev up` as a person runs it: in the background until its endpoint table is printed,
Ctrl-C at the end (and it must stop cleanly)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

TIDELOG = [sys.executable, "-m", "tidelog.cli.main"]
START_TIMEOUT_S = 90.0


@contextlib.contextmanager
def running_dev_up(data: Path, *arguments: str, environment: Mapping[str, str] | None = None) -> Iterator[str]:
    """Yields what `dev up` printed up to "Ctrl-C stops everything"."""
    process = subprocess.Popen(
        [*TIDELOG, "dev", "up", "--data-dir", str(data), *arguments],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **(environment or {})},
    )
    assert process.stdout is not None
    lines = []
    deadline = time.monotonic() + START_TIMEOUT_S
    try:
        while time.monotonic() < deadline:
            line = process.stdout.readline()
            if not line:
                break
            lines.append(line)
            if "Ctrl-C stops everything" in line:
                break
        output = "".join(lines)
        assert "Ctrl-C stops everything" in output, output
        yield output
    finally:
        process.send_signal(signal.SIGINT)
        rest, _ = process.communicate(timeout=60)
    assert process.returncode == 0, rest
    assert "stopped." in rest
