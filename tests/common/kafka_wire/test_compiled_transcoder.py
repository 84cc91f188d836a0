"""The compiled Kafka v2 → stored transcoder (_v2records.c) against two references: aiokafka's
reader (the path it replaces) on every well-formed batch, byte for byte; and, on batches whose
records were damaged (CRC made right again, so the records are what is read), a small reader
written here to Kafka's own rules (DefaultRecord.readFrom), which aiokafka does not follow
everywhere: it reads a record's attributes as a varint, where Kafka reads one byte."""

from __future__ import annotations

import shutil
import struct
import sysconfig
from pathlib import Path

import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch as TheirBatch
from kafka.record.default_records import DefaultRecordBatchBuilder as TheirBuilder

from tidelog.common.errors import CorruptRecordError, InvalidRecordError, TidelogError
from tidelog.common.kafka_wire import record_batches
from tidelog.common.kafka_wire.record_batches import KAFKA_HEADER, KAFKA_OVERHEAD, from_kafka_batches, to_kafka_batches
from tidelog.common.record.batch_encoding import encode_batch
from tidelog.common.record.batch_layout import TimestampType, restamp
from tidelog.common.record.control import ControlType, Marker, encode_marker

compiled = record_batches._v2records
needs_compiled = pytest.mark.skipif(compiled is None, reason="the transcoder was not compiled (no C compiler)")

BASE_TIME = 1_700_000_000_000
optional_bytes = st.one_of(st.none(), st.binary(max_size=40))
headers = st.lists(st.tuples(st.text(max_size=8), optional_bytes), max_size=3)
rows = st.lists(
    st.tuples(st.integers(0, 3), optional_bytes, optional_bytes, st.integers(-5_000, 10_000), headers),
    min_size=1,
    max_size=40,
)


def _batch(
    batch_rows: list, *, producer: tuple[int, int, int] = (-1, -1, -1), txn: bool = False, codec: int = 0
) -> bytes:
    """kafka-python's builder (pure Python); the first field of each row is the gap before its
    offset delta (a compacted batch's deltas skip)."""
    builder = TheirBuilder(2, codec, txn, *producer, batch_size=1 << 30)
    delta = -1
    for gap, key, value, timestamp, record_headers in batch_rows:
        delta += 1 + gap
        builder.append(delta, BASE_TIME + timestamp, key, value, record_headers)
    return bytes(builder.build())


def _varint(data: bytes, position: int, limit: int, most: int = 5) -> tuple[int, int]:
    """Kafka's ByteUtils.readVarint (at most 5 bytes) and readVarlong (`most` 10)."""
    value = shift = 0
    while True:
        if position >= limit or shift >= 7 * most:
            raise CorruptRecordError("a varint runs past its record or is too long")
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return (value >> 1) ^ -(value & 1), position


def _kafka_rules(batch: bytes) -> bytes:
    """One uncompressed batch read by Kafka's rules (DefaultRecord.readFrom), stored by the column
    encoder: the reference for damaged records."""
    header = KAFKA_HEADER.unpack_from(batch)
    first_timestamp, count = header[7], header[12]
    data, position = batch, KAFKA_OVERHEAD
    out: dict[str, list] = {"deltas": [], "timestamps": [], "keys": [], "values": [], "headers": []}

    def sized(limit: int) -> bytes | None:
        nonlocal position
        size, position = _varint(data, position, limit)
        if size < 0:
            return None  # Kafka: any negative length is null
        if position + size > limit:
            raise CorruptRecordError("a length runs past its record")
        position += size
        return data[position - size : position]

    for _ in range(count):
        length, position = _varint(data, position, len(data))
        end = position + length
        if length < 1 or end > len(data):
            raise CorruptRecordError("a record's length runs past its batch")
        position += 1  # attributes: one byte
        timestamp_delta, position = _varint(data, position, end, most=10)
        offset_delta, position = _varint(data, position, end)
        if not -(2**31) <= offset_delta < 2**31:
            raise CorruptRecordError("out of range")
        key, value = sized(end), sized(end)
        header_count, position = _varint(data, position, end)
        if header_count < 0:
            raise CorruptRecordError("a negative header count")
        record_headers = []
        for _ in range(header_count):
            name = sized(end)
            if name is None or len(name) > 0xFFFF:
                raise CorruptRecordError("a header name")
            record_headers.append((name.decode(), sized(end)))  # (not UTF-8: UnicodeDecodeError)
        if position != end:
            raise CorruptRecordError("a record's fields do not fill its length")
        timestamp = (first_timestamp + timestamp_delta + 2**63) % 2**64 - 2**63  # Java's long addition wraps
        for column, item in zip(list(out.values())[:4], (offset_delta, timestamp, key, value), strict=True):
            column.append(item)
        out["headers"].append(tuple(record_headers))
    if position != len(data) or not out["values"]:
        raise CorruptRecordError("bytes left over, or no record")
    timestamps = out["timestamps"]
    return encode_batch(
        out["values"],
        keys=out["keys"],
        timestamps=timestamps[0] if min(timestamps) == max(timestamps) else timestamps,
        headers=out["headers"],
        offset_deltas=out["deltas"],
        last_offset_delta=header[6],
        producer_id=header[9],
        producer_epoch=header[10],
        base_sequence=header[11],
        transactional=bool(header[5] & 0x10),
    )


def can_compile() -> bool:
    """A C compiler and this Python's headers: what setup.py's optional extension needs."""
    headers = Path(sysconfig.get_paths()["include"]) / "Python.h"
    return bool(shutil.which("cc") or shutil.which("gcc")) and headers.exists()


def test_the_transcoder_is_compiled_wherever_it_can_be() -> None:
    if not can_compile():
        pytest.skip("no C compiler or no Python headers here: the Kafka listener reads with aiokafka")
    assert compiled is not None, "setup.py's extension did not build: the Kafka listener reads with aiokafka"


@needs_compiled
@settings(max_examples=200, deadline=None)
@given(batch_rows=rows, txn=st.booleans(), codec=st.sampled_from([0, 1, 2, 3, 4]))
def test_a_well_formed_batch_is_stored_byte_for_byte_as_aiokafka_reads_it(
    batch_rows: list, txn: bool, codec: int
) -> None:
    """Every codec: a compressed batch is inflated by aiokafka's codecs, then transcoded."""
    sent = _batch(batch_rows, producer=(4711, 3, 100), txn=txn, codec=codec)
    assert from_kafka_batches(sent) == from_kafka_batches(sent, compiled=False)


@needs_compiled
@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_a_compressed_batch_that_does_not_inflate_is_refused_as_corrupt(codec: int) -> None:
    batch = bytearray(_batch([(0, None, b"value" * 50, 0, [])] * 20, codec=codec))
    if TheirBatch(bytes(batch)).compression_type != codec:
        pytest.skip("kafka-python left this batch uncompressed")
    batch[KAFKA_OVERHEAD : KAFKA_OVERHEAD + 8] = b"\xff" * 8  # the codec's framing broken
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
    with pytest.raises(CorruptRecordError):
        from_kafka_batches(bytes(batch))


@needs_compiled
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batch_rows=rows, damage=st.lists(st.tuples(st.integers(0, 2), st.integers(0), st.integers(0, 255)), max_size=3))
def test_damaged_records_are_refused_or_read_as_kafka_reads_them(batch_rows: list, damage: list) -> None:
    batch = bytearray(_batch(batch_rows))
    for kind, where, byte in damage:
        position = KAFKA_OVERHEAD + where % (len(batch) - KAFKA_OVERHEAD)
        if kind == 0:
            batch[position] = byte
        elif kind == 1:
            batch.insert(position, byte)
        elif len(batch) > KAFKA_OVERHEAD + 1:
            del batch[position]
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
    try:
        expected: bytes | None = _kafka_rules(bytes(batch))
    except (CorruptRecordError, UnicodeDecodeError):
        expected = None
    if expected is None:
        with pytest.raises(CorruptRecordError):
            from_kafka_batches(bytes(batch))
    else:
        assert from_kafka_batches(bytes(batch)) == expected


def _with_records(records: bytes, count: int, first_timestamp: int = BASE_TIME) -> bytes:
    """A batch of hand-written records (CRC and length right)."""
    header = bytearray(_batch([(0, None, b"x", 0, [])]))[:KAFKA_OVERHEAD]
    struct.pack_into(">q", header, 27, first_timestamp)
    struct.pack_into(">i", header, 57, count)
    batch = header + records
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
    return bytes(batch)


@needs_compiled
def test_kafkas_record_rules_hold_where_aiokafka_reads_otherwise() -> None:
    # length 7: attributes 0x93 (one byte, though it looks like a varint's), timestamp delta 0,
    # offset delta 0, key length -3 (null, as any negative), value length 1, "v", no headers
    stored = from_kafka_batches(_with_records(bytes([14, 0x93, 0, 0, 5, 2, ord("v"), 0]), 1))
    assert stored == encode_batch([b"v"], timestamps=BASE_TIME)


@pytest.mark.parametrize(
    ("records", "count", "refusal"),
    [
        (bytes([12, 0, 0, 0, 1, 1, 1]), 1, "negative header count"),  # header count -1
        (bytes([12, 0, 0, 0, 1, 1, 0, 0]), 1, "left over"),  # a byte after the last record
        (bytes([12, 0, 0, 0, 1, 1, 0]), 5, "record count"),  # five records claimed in seven bytes
        (bytes([20, 0, 0, 0, 1, 1, 2, 4, 0xC3, 0x28, 1]), 1, "not UTF-8"),  # header name b"\xc3("
        (bytes([12, 0, 0x80, 0x80, 0x80, 0x80, 0x80, 0]), 1, "varint"),  # a varint past its record
        (bytes([14, 0, 0, 0, 1, 6, 97, 98]), 1, "past its record"),  # value length 3, two bytes left
    ],
)
@needs_compiled
def test_records_kafka_would_refuse_are_refused_as_corrupt(records: bytes, count: int, refusal: str) -> None:
    with pytest.raises(CorruptRecordError, match=refusal):
        from_kafka_batches(_with_records(records, count))


@needs_compiled
def test_a_timestamp_past_64_bits_wraps_as_kafkas_and_an_empty_batch_is_refused() -> None:
    # first timestamp 2**62, a record's delta 2**63 - 1 (zigzag 2**64 - 2: ten bytes): Java's long
    # addition wraps, and so do aiokafka's reader and ours
    delta = bytes([0xFE, *[0xFF] * 8, 0x01])
    far = _with_records(bytes([30, 0, *delta, 0, 1, 1, 0]), 1, first_timestamp=2**62)
    wrapped = 2**62 + 2**63 - 1 - 2**64
    assert from_kafka_batches(far) == from_kafka_batches(far, compiled=False) == _kafka_rules(far)
    assert from_kafka_batches(far) == encode_batch([None], timestamps=wrapped)
    empty = _with_records(b"", 0)
    with pytest.raises(InvalidRecordError):
        from_kafka_batches(empty)
    with pytest.raises(TidelogError):
        from_kafka_batches(empty, compiled=False)


def _read_back(kafka_batches: bytes) -> list[tuple]:
    """What a Kafka reader (kafka-python's, pure Python) sees: each batch's fields and records."""
    seen: list[tuple] = []
    position = 0
    while position < len(kafka_batches):
        size = 12 + struct.unpack_from(">i", kafka_batches, position + 8)[0]
        batch = TheirBatch(kafka_batches[position : position + size])
        assert batch.validate_crc()
        fields = (batch.base_offset, batch.producer_id, batch.producer_epoch, batch.base_sequence)
        flags = (batch.is_transactional, batch.is_control_batch, batch.timestamp_type, batch.last_offset_delta)
        records = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in batch]
        seen.append((fields, flags, struct.unpack_from(">i", kafka_batches, position + 12)[0], records))
        position += size
    return seen


@needs_compiled
@settings(max_examples=150, deadline=None)
@given(batch_rows=rows, txn=st.booleans(), codec=st.sampled_from([0, 1, 2, 3, 4]))
def test_a_stored_batch_goes_out_as_aiokafkas_builder_writes_it(batch_rows: list, txn: bool, codec: int) -> None:
    """The fetch side: what the compiled path sends is read by a Kafka reader exactly as the
    builder's; byte for byte, too, but for gzip (its header carries the time)."""
    stored = bytearray(from_kafka_batches(_batch(batch_rows, producer=(4711, 3, 100), txn=txn, codec=codec)))
    restamp(memoryview(stored), base_offset=1_000, partition_leader_epoch=7)
    compiled_out = to_kafka_batches(bytes(stored))
    reference = to_kafka_batches(bytes(stored), compiled=False)
    assert _read_back(compiled_out) == _read_back(reference)
    if codec != 1:
        assert compiled_out == reference


@needs_compiled
def test_a_control_batch_goes_out_with_its_bit_and_a_corrupt_stored_section_is_refused() -> None:
    marker = bytearray(encode_marker(9, 2, Marker(ControlType.COMMIT, 5), timestamp=BASE_TIME))
    restamp(memoryview(marker), base_offset=40, partition_leader_epoch=3)
    assert _read_back(to_kafka_batches(bytes(marker))) == _read_back(to_kafka_batches(bytes(marker), compiled=False))
    assert _read_back(to_kafka_batches(bytes(marker)))[0][1][1]  # is_control_batch
    append_time = encode_batch(
        [b"a", b"b"], timestamps=[BASE_TIME, BASE_TIME + 5], timestamp_type=TimestampType.LOG_APPEND_TIME
    )
    read = _read_back(to_kafka_batches(append_time))
    assert read == _read_back(to_kafka_batches(append_time, compiled=False))
    assert read[0][1][2] == TimestampType.LOG_APPEND_TIME and {r[1] for r in read[0][3]} == {BASE_TIME + 5}
    broken = bytearray(encode_batch([b"a", b"b"], timestamps=BASE_TIME))
    struct.pack_into("<i", broken, 61 + 2 * 12, 1_000)  # the first value's length: past the section
    with pytest.raises(CorruptRecordError, match="columns account"):
        to_kafka_batches(bytes(broken))
