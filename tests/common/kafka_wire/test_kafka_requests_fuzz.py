"""The Kafka request parser and the produce-side record transcoder under coverage-guided fuzzing
(atheris): the committed corpus replayed, and a bounded fuzzing run."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fuzzing import bounded_run, replay_corpus

HERE = Path(__file__).parent
CORPUS = HERE / "fuzz_corpus"
TARGET = HERE / "fuzz_kafka_requests.py"
RUNS = 20_000  # a few seconds here; `-runs=1000000` by hand for a longer search

atheris = pytest.importorskip("atheris", reason="atheris not installed (the test extra)")


def test_the_corpus_replays_without_an_unexpected_exception() -> None:
    replay_corpus(TARGET, CORPUS, at_least=6)


def test_a_bounded_fuzzing_run_finds_nothing(tmp_path: Path) -> None:
    bounded_run(TARGET, CORPUS, tmp_path, runs=RUNS)
