"""Faults injected into a running process without touching its code (issue 19): libfaults.c,
built here with the machine's C compiler and preloaded into the process (LD_PRELOAD), shifts its
wall clock and slows its writes and syncs to regular files, as a `FaultControl` says while it runs.
`injection_unavailable()` says why it cannot be built ("" when it can), for a skip with the reason.
"""

from __future__ import annotations

import functools
import os
import shutil
import struct
import subprocess
import tempfile
from pathlib import Path

SOURCE = Path(__file__).with_name("libfaults.c")


@functools.cache
def library() -> Path | str:
    """The built shared library, or why it could not be built."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        return "no C compiler to build tests/faults/libfaults.c"
    built = Path(tempfile.mkdtemp(prefix="tidelog-libfaults-")) / "libfaults.so"
    result = subprocess.run(
        [compiler, "-shared", "-fPIC", "-O2", "-o", str(built), str(SOURCE), "-ldl"],
        check=False,
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        return f"building libfaults.so failed: {result.stderr.strip()[:300]}"
    return built


def injection_unavailable() -> str:
    built = library()
    return built if isinstance(built, str) else ""


class FaultControl:
    """One process's faults: `environment` goes into its environment at start; then set
    `clock_offset_s` and `write_delay_ms` at any time."""

    def __init__(self, path: Path, *, slow_dir: Path | None = None) -> None:
        self.path = path
        self.slow_dir = slow_dir  # the disk that slows: files under this folder only
        path.write_bytes(bytes(16))
        self._clock_offset_ns = 0
        self._write_delay_us = 0

    @property
    def environment(self) -> dict[str, str]:
        built = library()
        assert isinstance(built, Path), built
        variables = {"LD_PRELOAD": str(built), "TIDELOG_FAULTS_CONTROL": str(self.path)}
        if self.slow_dir is not None:
            variables["TIDELOG_FAULTS_SLOW_DIR"] = str(self.slow_dir.resolve())
        return variables

    def _store(self) -> None:
        descriptor = os.open(self.path, os.O_WRONLY)
        try:
            os.pwrite(descriptor, struct.pack("<qq", self._clock_offset_ns, self._write_delay_us), 0)
        finally:
            os.close(descriptor)

    def shift_clock(self, seconds: float) -> None:
        """The process's wall clock reads `seconds` away from the real one (0: back to true)."""
        self._clock_offset_ns = int(seconds * 1e9)
        self._store()

    def slow_disk(self, delay_ms: float) -> None:
        """Every write or sync of a regular file waits `delay_ms` first (0: a healthy disk)."""
        self._write_delay_us = int(delay_ms * 1000)
        self._store()
