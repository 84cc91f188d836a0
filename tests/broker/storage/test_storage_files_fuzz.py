"""The broker's on-disk indexes and checkpoints under coverage-guided fuzzing (atheris): the
committed corpus replayed and a bounded run; nothing found so far (224,453 runs by hand), so no
regression tests yet."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
CORPUS = HERE / "fuzz_corpus"
TARGET = HERE / "fuzz_storage_files.py"
RUNS = 1_000  # file I/O per input: about 2,500 a second here, after the instrumenting start

atheris = pytest.importorskip("atheris", reason="atheris not installed (the test extra)")


def test_the_corpus_replays_without_an_unexpected_exception(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FUZZ_STORAGE_DIR", str(tmp_path))
    sys.path.insert(0, str(HERE))
    try:
        from fuzz_storage_files import fuzz_one  # noqa: PLC0415 - the target, imported as the fuzzer does
    finally:
        sys.path.remove(str(HERE))
    inputs = sorted(CORPUS.iterdir())
    assert len(inputs) >= 5  # the seeds: both index kinds, checkpoints of 1 and 2 fields, empty
    for path in inputs:
        fuzz_one(path.read_bytes())  # raises anything but the files' own errors


def test_a_bounded_fuzzing_run_finds_nothing(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    shutil.copytree(CORPUS, corpus)
    files = tmp_path / "files"
    files.mkdir()
    run = subprocess.run(
        [
            sys.executable,
            str(TARGET),
            f"-runs={RUNS}",
            "-max_total_time=60",
            f"-artifact_prefix={tmp_path}/",
            str(corpus),
        ],
        env={**os.environ, "FUZZ_STORAGE_DIR": str(files)},
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    crashes = sorted(path.name for path in tmp_path.glob("crash-*"))
    assert run.returncode == 0 and not crashes, (crashes, run.stderr[-3000:])
