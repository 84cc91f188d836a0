"""Stored batches → Arrow with the Kafka source's schema, built from the columns in bulk, held to a
model built record by record from the decoded batches (the codec's own decode)."""

from __future__ import annotations

import datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidelog.common.record.batch import decode_batch, decode_columns, encode_batch, restamp
from tidelog.common.record.compression import CompressionType
from tidelog.spark.arrow_rows import arrow_schema, to_arrow

optional_bytes = st.one_of(st.none(), st.binary(max_size=24))
header_lists = st.lists(st.tuples(st.text(max_size=6), st.one_of(st.none(), st.binary(max_size=8))), max_size=2).map(
    tuple
)


@st.composite
def stored(draw: st.DrawFn) -> list[bytes]:
    """A partition's batches back to back, offsets following on (as a fetch returns them)."""
    found = []
    offset = draw(st.integers(min_value=0, max_value=1000))
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        count = draw(st.integers(min_value=1, max_value=12))
        batch = encode_batch(
            draw(st.lists(optional_bytes, min_size=count, max_size=count)),
            keys=draw(st.one_of(st.none(), st.lists(optional_bytes, min_size=count, max_size=count))),
            timestamps=draw(st.lists(st.integers(0, 2**41), min_size=count, max_size=count)),
            headers=draw(st.one_of(st.none(), st.lists(header_lists, min_size=count, max_size=count))),
            compression=draw(st.sampled_from(list(CompressionType))),
            base_offset=offset,
        )
        found.append(batch)
        offset += count
    return found


def _model(batches: list[bytes], start: int, end: int, topic: str, partition: int) -> list[dict[str, object]]:
    rows = []
    for encoded in batches:
        batch = decode_batch(encoded)
        for record in batch.records():
            if start <= record.offset < end:
                rows.append(
                    {
                        "key": record.key,
                        "value": record.value,
                        "topic": topic,
                        "partition": partition,
                        "offset": record.offset,
                        "timestamp": datetime.datetime.fromtimestamp(record.timestamp / 1000, tz=datetime.UTC),
                        "timestampType": batch.header.timestamp_type,
                        "headers": [{"key": k, "value": v} for k, v in record.headers] or None,
                    }
                )
    return rows


@given(stored(), st.data())
def test_arrow_rows_are_the_records_in_range(batches: list[bytes], data: st.DataObject) -> None:
    first = decode_batch(batches[0]).offsets[0]
    last = decode_batch(batches[-1]).offsets[-1]
    start = data.draw(st.integers(min_value=first - 2, max_value=last + 2))
    end = data.draw(st.integers(min_value=start, max_value=last + 3))
    columns = [decode_columns(batch) for batch in batches]
    built = to_arrow("t", 3, columns, start, end, include_headers=True)
    wanted = _model(batches, start, end, "t", 3)
    if not wanted:
        assert built is None
        return
    assert built is not None and built.schema == arrow_schema(True)
    assert built.to_pylist() == wanted
    plain = to_arrow("t", 3, columns, start, end, include_headers=False)
    assert plain is not None and plain.schema == arrow_schema(False)
    assert plain.to_pylist() == [{k: v for k, v in row.items() if k != "headers"} for row in wanted]


def test_log_append_time_batches_say_so() -> None:
    batch = bytearray(encode_batch([b"a"], timestamps=[1]))
    restamp(batch, base_offset=0, partition_leader_epoch=0, log_append_time=1_700_000_000_000)
    built = to_arrow("t", 0, [decode_columns(batch)], 0, 1, include_headers=False)
    assert built is not None
    row = built.to_pylist()[0]
    assert row["timestampType"] == 1
    assert row["timestamp"] == datetime.datetime(2023, 11, 14, 22, 13, 20, tzinfo=datetime.UTC)


@pytest.mark.parametrize("keys", [None, [b"k"] * 3])
def test_a_column_without_nulls_has_no_validity_buffer(keys: list[bytes] | None) -> None:
    built = to_arrow("t", 0, [decode_columns(encode_batch([b"a", b"", b"c"], keys=keys))], 0, 3, include_headers=False)
    assert built is not None
    assert built.column(1).null_count == 0 and built.column(1).buffers()[0] is None
    assert built.column(0).null_count == (3 if keys is None else 0)
