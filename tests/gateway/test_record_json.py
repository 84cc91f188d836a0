"""Consumed records as REST bodies: the binary body written from columns says what a record-by-record
rendering says; a records GET's byte limit splits runs without losing or repeating a record."""

from __future__ import annotations

import base64
import json

from hypothesis import given
from hypothesis import strategies as st

from tidelog.client import TopicPartition
from tidelog.client.consumer_records import RecordRun, records_of
from tidelog.common.record.batch import Headers
from tidelog.gateway.consumer_instances import split_at_bytes
from tidelog.gateway.embedded_format import EmbeddedFormat
from tidelog.gateway.record_json import binary_records_json, records_as_objects

_HEADERS = st.lists(st.tuples(st.text(max_size=10), st.none() | st.binary(max_size=10)), max_size=2).map(tuple)
_ROW = st.tuples(st.none() | st.binary(max_size=40), st.none() | st.binary(max_size=40), _HEADERS)


@st.composite
def _runs(draw: st.DrawFn) -> list[RecordRun]:
    """Runs of several partitions (topics with any characters), each at its own offsets."""
    runs = []
    for _ in range(draw(st.integers(0, 4))):
        tp = TopicPartition(draw(st.text(min_size=1, max_size=12)), draw(st.integers(0, 3)))
        rows: list[tuple[bytes | None, bytes | None, Headers]] = draw(st.lists(_ROW, min_size=1, max_size=12))
        first = draw(st.integers(0, 2**40))
        offsets = list(range(first, first + len(rows)))
        runs.append(
            RecordRun(
                tp,
                offsets,
                [1_700_000_000_000 + offset for offset in offsets],
                [key for key, _, _ in rows],
                [value for _, value, _ in rows],
                [headers for _, _, headers in rows],
            )
        )
    return runs


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


@given(_runs())
def test_the_binary_body_from_columns_is_each_records_json(runs: list[RecordRun]) -> None:
    expected = [
        {
            "topic": record.topic,
            "key": _b64(record.key),
            "value": _b64(record.value),
            "partition": record.partition,
            "offset": record.offset,
            "timestamp": record.timestamp,
            "headers": [{"name": name, "value": _b64(raw)} for name, raw in record.headers],
        }
        for record in records_of(runs)
    ]
    assert json.loads(binary_records_json(runs)) == expected
    assert records_as_objects(runs, EmbeddedFormat.BINARY) == expected


def _size(run: RecordRun) -> int:
    return sum(len(key or b"") + len(value or b"") for key, value in zip(run.keys, run.values, strict=True))


@given(_runs(), st.integers(1, 300))
def test_a_byte_limit_keeps_the_first_records_that_fit_and_leaves_the_rest_whole(
    runs: list[RecordRun], max_bytes: int
) -> None:
    kept, left = split_at_bytes(runs, max_bytes)
    assert records_of(kept) + records_of(left) == records_of(runs)  # nothing lost, nothing twice
    assert all(len(run) > 0 for run in kept + left)
    kept_size = sum(map(_size, kept))
    assert kept_size <= max_bytes or len(records_of(kept)) == 1  # one record always goes
    if runs:
        assert kept
    if left:  # as many as fit: the next record would not
        first_left = left[0]
        assert kept_size + len(first_left.keys[0] or b"") + len(first_left.values[0] or b"") > max_bytes
