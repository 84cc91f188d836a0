"""Coverage-guided fuzzing (atheris) of what a broker reads back from disk at start: offset and
time indexes, and the text checkpoints (recovery point, leader epochs, cleaner offsets). Any bytes
a torn write or a bad disk leaves must load, or fail with the file's own error
(CorruptIndexError, CorruptCheckpointError), which recovery answers by rebuilding from the log —
never another exception.

    .venv/bin/python tests/broker/storage/fuzz_storage_files.py -runs=200000 CORPUS_DIR
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from pathlib import Path

import atheris

with atheris.instrument_imports(include=["tidelog"]):  # only ours: instrumenting every library took 10 s a start
    from tidelog.broker.storage import checkpoint, index

# Where each input is written: the test passes its own temporary folder (libFuzzer's exit skips
# Python's cleanup); by hand, a fresh one.
FOLDER = Path(os.environ.get("FUZZ_STORAGE_DIR") or tempfile.mkdtemp(prefix="fuzz-storage-"))


def fuzz_one(data: bytes) -> None:
    """The input as an index file and as a checkpoint; only the files' own errors may come out."""
    path = FOLDER / "input"
    path.write_bytes(data)
    for kind, check_against in ((index.OffsetIndex, 1 << 30), (index.TimeIndex, 1 << 40)):
        loaded = kind(path, base_offset=1000, max_entries=1 << 16)
        with contextlib.suppress(index.CorruptIndexError):
            loaded.load()
            loaded.check(check_against)
            if len(loaded):  # a loaded index answers lookups
                loaded.lookup(loaded.keys[len(loaded) // 2])
                loaded.truncate_to(1000 + len(loaded))
    for fields in (1, 2, 3):
        with contextlib.suppress(checkpoint.CorruptCheckpointError):
            checkpoint.read_checkpoint(path, fields)


def main() -> None:
    atheris.Setup(sys.argv, fuzz_one)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
