"""Coverage-guided fuzzing (atheris) of the REST gateway's body parsers: any bytes a client sends
as a body must parse or fail with a RestError (REST Proxy's 400 / 422 answers) — never another
exception, which the gateway would answer with a 500.

    .venv/bin/python tests/gateway/fuzz_rest_bodies.py -runs=200000 CORPUS_DIR
"""

from __future__ import annotations

import contextlib
import sys

import atheris
import fastapi  # noqa: F401 - imported first: the libraries are not instrumented, only our modules
import pydantic  # noqa: F401
import starlette  # noqa: F401

with atheris.instrument_imports(include=["tidelog"]):  # only ours: instrumenting every library took 10 s a start
    from tidelog.gateway import rest_models
    from tidelog.gateway.embedded_format import EmbeddedFormat
    from tidelog.gateway.producing import decode_records
    from tidelog.gateway.request_body import parse_model
    from tidelog.gateway.rest_errors import RestError

BODIES = (
    rest_models.CreateConsumer,
    rest_models.SubscriptionBody,
    rest_models.PartitionsBody,
    rest_models.OffsetsBody,
    rest_models.V3Record,
)


def fuzz_one(data: bytes) -> None:
    """The input as every request body; only RestError may come out."""
    for model in BODIES:
        with contextlib.suppress(RestError):
            parse_model(data, model)
    for model, embedded in (
        (rest_models.ProduceBody, EmbeddedFormat.JSON),
        (rest_models.BinaryProduceBody, EmbeddedFormat.BINARY),
    ):
        with contextlib.suppress(RestError):
            body = parse_model(data, model)
            decode_records(body.records, embedded)  # what the produce route does next


def main() -> None:
    atheris.Setup(sys.argv, fuzz_one)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
