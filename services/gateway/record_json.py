"""Consumed records as the JSON a records GET returns (REST Proxy's shape, plus timestamp and headers).

Binary, the common format, is written from each run's columns with bulk operations: base64 by
`map`, numbers by `map` of a bytes format, and the objects by `zip` and `join` of the columns with
the constant parts between them. That costs about what a template per record did (0.8 µs a record
here, 100-byte values; base64 is 0.23 of it), but it needs no record objects: building those was
0.65 µs a record more, and the gateway now takes runs straight from the fetched batches. The
property test in tests/gateway holds it to the general path's JSON. Other formats (json: a
document per key and value) are built as objects per record.
"""

from __future__ import annotations

import binascii
import functools
import itertools
from collections.abc import Iterable, Sequence
from typing import Any, Final

import orjson

from tidelog.client.consumer_records import RecordRun
from tidelog.common.record.batch import Headers
from tidelog.gateway.embedded_format import EmbeddedFormat

__all__ = ["binary_records_json", "records_as_objects"]

_BASE64: Final = functools.partial(binascii.b2a_base64, newline=False)
_NUMBER: Final = b"%d".__mod__


def binary_records_json(runs: Iterable[RecordRun]) -> bytes:
    """The JSON array of the runs' records, keys, values and header values in base64."""
    topics: dict[str, bytes] = {}
    parts = []
    for run in runs:
        topic = topics.get(run.partition.topic)
        if topic is None:
            topic = topics[run.partition.topic] = orjson.dumps(run.partition.topic)
        parts.append(_binary_run(run, topic))
    return b"[" + b",".join(parts) + b"]"


def _binary_run(run: RecordRun, topic: bytes) -> bytes:
    keys, key_quote = _base64_column(run.keys)
    values, value_quote = _base64_column(run.values)
    repeat = itertools.repeat
    columns: list[Iterable[bytes]] = [
        repeat(b'{"topic":' + topic + b',"key":' + key_quote, len(run)),  # (the one finite repeat)
        keys,
        repeat(key_quote + b',"value":' + value_quote),
        values,
        repeat(value_quote + b',"partition":%d,"offset":' % run.partition.partition),
        map(_NUMBER, run.offsets),
        repeat(b',"timestamp":'),
        map(_NUMBER, run.timestamps),
    ]
    if any(run.headers):
        columns += [repeat(b',"headers":'), map(_headers_json, run.headers), repeat(b"}")]
    else:
        columns.append(repeat(b',"headers":[]}'))
    return b",".join(map(b"".join, zip(*columns, strict=False)))  # (the repeats are endless)


def _base64_column(items: Sequence[bytes | None]) -> tuple[Iterable[bytes], bytes]:
    """The items in base64, and the quote the constant parts around them carry: none when some
    items are null (each then brings its own quotes, or is `null`)."""
    if None not in items:
        return map(_BASE64, items), b'"'
    return [b"null" if item is None else b'"' + _BASE64(item) + b'"' for item in items], b""


def _headers_json(headers: Headers) -> bytes:
    if not headers:
        return b"[]"
    return orjson.dumps(
        [{"name": name, "value": None if raw is None else _BASE64(raw).decode()} for name, raw in headers]
    )


def records_as_objects(runs: Iterable[RecordRun], embedded: EmbeddedFormat) -> list[dict[str, Any]]:
    """The runs' records as JSON objects; ValueError when a value cannot be given in `embedded`
    (a record that is not JSON, for a json consumer)."""
    decode = embedded.decode
    header_value = EmbeddedFormat.BINARY.decode
    rendered: list[dict[str, Any]] = []
    append = rendered.append
    for run in runs:
        topic, partition = run.partition.topic, run.partition.partition
        for offset, timestamp, key, value, headers in zip(
            run.offsets, run.timestamps, run.keys, run.values, run.headers, strict=True
        ):  # per record by nature (an object each): kept lean
            append(
                {
                    "topic": topic,
                    "key": decode(key),
                    "value": decode(value),
                    "partition": partition,
                    "offset": offset,
                    "timestamp": timestamp,
                    "headers": [{"name": name, "value": header_value(raw)} for name, raw in headers] if headers else [],
                }
            )
    return rendered
