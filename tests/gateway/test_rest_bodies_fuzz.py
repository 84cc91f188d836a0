"""The REST gateway's body parsers under coverage-guided fuzzing (atheris): the committed corpus
replayed, a bounded run, and regression tests for what was found — by the fuzzer's harness and by
hand where pydantic-core (not instrumented: Rust) hides the paths from the fuzzer."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fuzzing import bounded_run, replay_corpus
from tidelog.gateway import rest_models
from tidelog.gateway.embedded_format import EmbeddedFormat
from tidelog.gateway.producing import decode_records
from tidelog.gateway.request_body import parse_model
from tidelog.gateway.rest_errors import RestError

HERE = Path(__file__).parent
CORPUS = HERE / "fuzz_corpus"
TARGET = HERE / "fuzz_rest_bodies.py"
RUNS = 5_000  # about 4 s here

atheris = pytest.importorskip("atheris", reason="atheris not installed (the test extra)")


def test_the_corpus_replays_without_an_unexpected_exception() -> None:
    replay_corpus(TARGET, CORPUS, at_least=10)


def test_a_bounded_fuzzing_run_finds_nothing(tmp_path: Path) -> None:
    bounded_run(TARGET, CORPUS, tmp_path, runs=RUNS)


def _json_values(raw: bytes) -> list[bytes | None]:
    body = parse_model(raw, rest_models.ProduceBody)
    return decode_records(body.records, EmbeddedFormat.JSON).values


def test_an_integer_beyond_64_bits_is_stored_exactly() -> None:
    # was: orjson's TypeError ("Integer exceeds 64-bit range"), a 500 from the gateway
    assert _json_values(b'{"records":[{"value": 123456789012345678901234567890}]}') == [
        b"123456789012345678901234567890"
    ]


def test_a_number_beyond_a_double_is_refused_rather_than_stored_as_null() -> None:
    # was: parsed as infinity and stored as `null`, silently changed
    with pytest.raises(RestError, match=r"records\[0\]\.key holds a number beyond the range of a double"):
        body = parse_model(b'{"records":[{"key": {"x": 1e400}, "value": 1}]}', rest_models.ProduceBody)
        decode_records(body.records, EmbeddedFormat.JSON)
    assert _json_values(b'{"records":[{"value": [1, null, "null"]}]}') == [b'[1,null,"null"]']  # real nulls stay


def test_nesting_beyond_the_parsers_limit_is_malformed_json() -> None:
    with pytest.raises(RestError, match="recursion limit"):
        parse_model(b'{"records":[{"value": ' + b"[" * 300 + b"]" * 300 + b"}]}", rest_models.ProduceBody)
