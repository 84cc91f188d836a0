"""The gateway's pieces that need no cluster: embedded formats, authentication, the v3 stream parser."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from unittest.mock import ANY

import httpx
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tidelog.client import Producer
from tidelog.common.errors import ErrorCode, error_for
from tidelog.gateway.access import Authentication, load_credentials
from tidelog.gateway.app import _routes
from tidelog.gateway.embedded_format import EmbeddedFormat, accepted_format, produce_format
from tidelog.gateway.producing import OutgoingRecords, ProduceResults, decode_plain_records, decode_records, produce
from tidelog.gateway.request_body import parse_model
from tidelog.gateway.rest_errors import RestError
from tidelog.gateway.rest_models import BinaryProduceBody, ProduceBody
from tidelog.gateway.v3_routes import _documents


def test_formats_round_trip_and_refuse_what_they_cannot_carry() -> None:
    assert EmbeddedFormat.BINARY.decode(EmbeddedFormat.BINARY.encode("AP8=", "value")) == "AP8="
    assert EmbeddedFormat.JSON.decode(EmbeddedFormat.JSON.encode({"a": [1, None]}, "value")) == {"a": [1, None]}
    assert EmbeddedFormat.BINARY.encode(None, "key") is None
    for bad in ("***", 12):
        with pytest.raises(RestError) as refused:
            EmbeddedFormat.BINARY.encode(bad, "records[3].value")
        assert refused.value.error_code == 42206 and "records[3].value" in refused.value.message


def test_content_types() -> None:
    assert produce_format("application/vnd.kafka.binary.v2+json; charset=utf-8") is EmbeddedFormat.BINARY
    assert produce_format("application/vnd.kafka.json.v2+json") is EmbeddedFormat.JSON
    assert produce_format("application/json") is EmbeddedFormat.JSON
    with pytest.raises(RestError) as refused:
        produce_format("application/vnd.kafka.avro.v2+json")
    assert refused.value.status == 415
    accepted_format("application/vnd.kafka.binary.v2+json, */*;q=0.1", EmbeddedFormat.JSON)
    accepted_format(None, EmbeddedFormat.BINARY)
    with pytest.raises(RestError) as mismatch:
        accepted_format("application/vnd.kafka.binary.v2+json", EmbeddedFormat.JSON)
    assert (mismatch.value.status, mismatch.value.error_code) == (406, 40601)


def _whoami_app(credentials: dict[str, str]) -> httpx.AsyncClient:
    async def whoami(request: Request) -> JSONResponse:
        return JSONResponse({"principal": request.scope["state"]["principal"]})

    inner = Starlette(routes=[Route("/topics", whoami), Route("/openapi.json", whoami)])
    transport = httpx.ASGITransport(app=Authentication(inner, credentials))
    return httpx.AsyncClient(transport=transport, base_url="http://gateway")


async def test_api_keys_bearer_tokens_and_basic_map_to_principals(tmp_path: Path) -> None:
    path = tmp_path / "credentials"
    path.write_text("# credential principal\nkey-1 alice\n\ntoken-2 bob\nkey3:secret3 carol\n")
    credentials = load_credentials(path)
    async with _whoami_app(credentials) as client:
        assert (await client.get("/topics", headers={"x-api-key": "key-1"})).json() == {"principal": "alice"}
        bearer = {"authorization": "Bearer token-2"}
        assert (await client.get("/topics", headers=bearer)).json() == {"principal": "bob"}
        assert (await client.get("/topics", auth=("key3", "secret3"))).json() == {"principal": "carol"}
        for headers in ({}, {"x-api-key": "key-2"}, {"authorization": "Bearer "}, {"authorization": "Basic !!"}):
            refused = await client.get("/topics", headers=headers)
            assert (refused.status_code, refused.json()["error_code"]) == (401, 40101)
            assert refused.headers["www-authenticate"].startswith("Bearer")
        assert (await client.get("/openapi.json")).json() == {"principal": "anonymous"}  # documents stay open
    async with _whoami_app({}) as client:  # no credentials configured: off
        assert (await client.get("/topics")).json() == {"principal": "anonymous"}
    path.write_text("only-one-field\n")
    with pytest.raises(ValueError, match="credential principal"):
        load_credentials(path)


class _ChunkedRequest:
    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks

    async def stream(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            yield chunk


async def _parse(chunks: list[bytes], limit: int = 1 << 20) -> list[Any]:
    return [document async for document in _documents(_ChunkedRequest(chunks), limit)]  # type: ignore[arg-type]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=6,
)


@given(
    st.lists(st.dictionaries(st.text(max_size=4), json_values, max_size=3), max_size=8),
    st.lists(st.integers(min_value=1, max_value=40), min_size=1, max_size=20),
    st.sampled_from(["", " ", "\n", "\r\n\t"]),
)
async def test_a_stream_of_json_records_parses_the_same_however_it_is_cut(
    documents: list[dict[str, Any]], cuts: list[int], separator: str
) -> None:
    body = separator.join(json.dumps(document, ensure_ascii=False) for document in documents).encode()
    chunks, position = [], 0
    for cut in cuts * (len(body) // sum(cuts) + 1):
        chunks.append(body[position : position + cut])
        position += cut
    assert await _parse(chunks) == documents


async def test_a_malformed_or_oversized_record_is_reported() -> None:
    with pytest.raises(ValueError, match="malformed"):
        await _parse([b'{"a": 1} {"b": ] } {"c": 3}'])
    with pytest.raises(ValueError, match="end of the body"):
        await _parse([b'{"a": 1} {"b": '])
    with pytest.raises(ValueError, match="UTF-8"):
        await _parse([b'{"a": "\xff\xfe"}'])
    with pytest.raises(RestError) as too_big:
        await _parse([b'{"a": "' + b"x" * 100, b"x" * 100], limit=150)
    assert too_big.value.status == 413


async def test_an_unexpected_failure_still_answers_with_the_rest_error_body() -> None:
    class BrokenAdmin:
        async def list_topics(self) -> list[str]:
            raise RuntimeError("etcd went away")

    context = SimpleNamespace(admin=BrokenAdmin())
    context.for_caller = lambda scope: context  # (no principal propagation here)
    app = _routes(context)  # type: ignore[arg-type]
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
        answer = await client.get("/topics")
    assert answer.status_code == 500
    assert answer.json() == {"error_code": 50002, "message": "internal error: RuntimeError: etcd went away"}


async def test_a_record_too_large_refuses_the_request_before_any_record_is_queued() -> None:
    class TwoPartitions:
        async def partitions_of(self, topic: str) -> list[object]:
            return [object(), object()]

    producer = Producer(["127.0.0.1:9"], max_request_size=2048, batch_size=1024)  # never reached: nothing is sent
    records = OutgoingRecords([None] * 4, [b"small"] * 3 + [b"x" * 4096], [None] * 4)
    with pytest.raises(RestError) as refused:
        await produce(producer, TwoPartitions(), "t", records)  # type: ignore[arg-type]
    assert refused.value.error_code == 42206 and "records[3]" in refused.value.message
    assert not list(producer.accumulator.waiting()) and producer._sender_task is None  # nothing started
    await producer.close()


_JSON_LEAVES = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False)
    | st.text(max_size=8)
)
_JSON_VALUES = st.recursive(
    _JSON_LEAVES, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
)
_BASE64ISH = st.text(alphabet="AQIDYWJj+/=\n -_", max_size=12)
_TRICKY_TEXT = st.text(alphabet='a "\\\0\u2028é😀', max_size=6)  # escapes, non-printables, UTF-8
_ANY_FIELD = _JSON_VALUES | _BASE64ISH | _TRICKY_TEXT | st.integers(-2, 5) | st.just("1")
_PLAIN_RECORDS = st.fixed_dictionaries({}, optional={"key": _ANY_FIELD, "value": _ANY_FIELD, "partition": _ANY_FIELD})
_ODD_FIELDS = st.sampled_from(["key", "value", "headers", "timestamp", "other"])
_ODD_RECORDS = st.dictionaries(_ODD_FIELDS, _ANY_FIELD, max_size=3)


@settings(max_examples=500, deadline=None)
@given(st.sampled_from(list(EmbeddedFormat)), st.lists(_PLAIN_RECORDS | _ODD_RECORDS, max_size=4))
def test_the_plain_produce_path_accepts_exactly_what_the_models_accept(
    embedded: EmbeddedFormat, records: list[dict[str, Any]]
) -> None:
    data = json.dumps({"records": records}).encode()
    fast = decode_plain_records(data, embedded, records_max=3)
    if fast is None:
        return  # the model path decides (and explains a refusal)
    model = BinaryProduceBody if embedded is EmbeddedFormat.BINARY else ProduceBody
    assert len(records) <= 3
    assert fast == decode_records(parse_model(data, model).records, embedded)


_STRINGS = (
    _TRICKY_TEXT
    | st.text(max_size=10)
    | _BASE64ISH
    | st.binary(max_size=9).map(lambda raw: base64.b64encode(raw).decode())
    # padding past a whole quad: strict a2b_base64 takes it, the models do not
    | st.tuples(st.binary(max_size=9), st.integers(1, 4)).map(lambda t: base64.b64encode(t[0]).decode() + "=" * t[1])
)
_STRING_RECORDS = st.fixed_dictionaries(
    {"value": st.none() | _STRINGS}, optional={"key": st.none() | _STRINGS, "partition": st.integers(0, 5)}
)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(list(EmbeddedFormat)), st.lists(_STRING_RECORDS, min_size=1, max_size=6))
@example(EmbeddedFormat.BINARY, [{"value": "0000="}])
@example(EmbeddedFormat.BINARY, [{"value": "AAAA===="}])
def test_string_columns_are_encoded_in_bulk_as_the_model_path_encodes_each(
    embedded: EmbeddedFormat, records: list[dict[str, Any]]
) -> None:
    # The fast path quotes and encodes a column of strings at once (JSON), or decodes them with
    # strict base64 (binary): what it takes, it must store as the model path would.
    data = json.dumps({"records": records}).encode()
    fast = decode_plain_records(data, embedded, records_max=10)
    model = BinaryProduceBody if embedded is EmbeddedFormat.BINARY else ProduceBody
    try:
        expected = decode_records(parse_model(data, model).records, embedded)
    except RestError:
        assert fast is None  # refused there: not taken here
        return
    if embedded is EmbeddedFormat.JSON:
        assert fast is not None  # any JSON string is a JSON value: the fast path takes them all
    assert fast is None or fast == expected


@given(
    st.lists(
        st.tuples(st.integers(0, 2**31), st.integers(0, 2**62), st.none() | st.sampled_from(["refused", "retry"])),
        max_size=20,
    )
)
def test_the_produce_response_from_columns_is_each_records_entry(
    rows: list[tuple[int, int, str | None]],
) -> None:
    results = ProduceResults([p for p, _, _ in rows], [o for _, o, _ in rows], {})
    for index, (_, _, failure) in enumerate(rows):
        if failure is not None:
            code = ErrorCode.INVALID_RECORD if failure == "refused" else ErrorCode.NOT_LEADER_OR_FOLLOWER
            results.errors[index] = error_for(code, failure)
            results.partitions[index] = results.offsets[index] = None
    expected = [
        {"partition": p, "offset": o, "error_code": None, "error": None}
        if failure is None
        else {"partition": None, "offset": None, "error_code": 1 if failure == "refused" else 2, "error": ANY}
        for p, o, failure in rows
    ]
    body = json.loads(results.response_json())
    assert body == {"key_schema_id": None, "value_schema_id": None, "offsets": expected}
    assert results.produced() == sum(1 for _, _, failure in rows if failure is None)
