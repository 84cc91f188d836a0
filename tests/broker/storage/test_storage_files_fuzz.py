"""The broker's on-disk indexes and checkpoints under coverage-guided fuzzing (atheris): the
committed corpus replayed and a bounded run; nothing found so far (224,453 runs by hand), so no
regression tests yet."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fuzzing import bounded_run, replay_corpus

HERE = Path(__file__).parent
CORPUS = HERE / "fuzz_corpus"
TARGET = HERE / "fuzz_storage_files.py"
RUNS = 1_000  # file I/O per input: about 2,500 a second here, after the instrumenting start

atheris = pytest.importorskip("atheris", reason="atheris not installed (the test extra)")


def test_the_corpus_replays_without_an_unexpected_exception(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FUZZ_STORAGE_DIR", str(tmp_path))
    replay_corpus(TARGET, CORPUS, at_least=5)  # both index kinds, checkpoints of 1 and 2 fields, empty


def test_a_bounded_fuzzing_run_finds_nothing(tmp_path: Path) -> None:
    files = tmp_path / "files"
    files.mkdir()
    bounded_run(TARGET, CORPUS, tmp_path, runs=RUNS, env={"FUZZ_STORAGE_DIR": str(files)})
