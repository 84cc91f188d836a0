"""Kafka v2 batches through the stored format and back: what kafka-python's own (pure Python,
independent of the aiokafka codec we use) builder writes, its reader reads back the same, for any
records and every codec; and a batch that is not whole, not v2 or fails its CRC is refused."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch as TheirBatch
from kafka.record.default_records import DefaultRecordBatchBuilder as TheirBuilder

from tidelog.common.errors import CorruptRecordError, InvalidRecordError
from tidelog.common.kafka_wire.record_batches import from_kafka_batches, to_kafka_batches
from tidelog.common.record.batch_decoding import decode_batches
from tidelog.common.record.batch_encoding import encode_batch
from tidelog.common.record.batch_layout import iter_headers, restamp
from tidelog.common.record.control import ControlType, Marker, encode_marker

BASE_TIME = 1_700_000_000_000
CODECS = [0, 1, 2, 3, 4]  # none, gzip, snappy, lz4, zstd

optional_bytes = st.one_of(st.none(), st.binary(max_size=40))
headers = st.lists(st.tuples(st.text(max_size=8), optional_bytes), max_size=3)
records = st.lists(st.tuples(optional_bytes, optional_bytes, st.integers(0, 10_000), headers), min_size=1, max_size=30)


def _theirs(
    batch_records: list, codec: int, *, producer: tuple[int, int, int] = (-1, -1, -1), txn: bool = False
) -> bytes:
    builder = TheirBuilder(2, codec, txn, *producer, batch_size=1 << 30)
    for delta, (key, value, timestamp, record_headers) in enumerate(batch_records):
        builder.append(delta, BASE_TIME + timestamp, key, value, record_headers)
    return bytes(builder.build())


def _stored_at(stored: bytes, base_offset: int, epoch: int) -> bytes:
    """The stored batches as the leader appends them: offsets and epoch stamped."""
    out = bytearray(stored)
    for position, header in list(iter_headers(stored)):
        view = memoryview(out)[position : position + header.size]
        restamp(view, base_offset=base_offset, partition_leader_epoch=epoch)
        base_offset += header.last_offset_delta + 1
    return bytes(out)


@settings(max_examples=60, deadline=None)
@given(batch_records=records, codec=st.sampled_from(CODECS))
def test_what_a_kafka_client_writes_comes_back_to_it_record_for_record(batch_records: list, codec: int) -> None:
    sent = _theirs(batch_records, codec, producer=(4711, 3, 100))
    stored = _stored_at(from_kafka_batches(sent), 500, 9)
    back = TheirBatch(to_kafka_batches(stored))
    assert back.validate_crc()
    # (kafka-python leaves a batch uncompressed where the codec would make it larger)
    assert (back.base_offset, back.compression_type) == (500, TheirBatch(sent).compression_type)
    assert (back.producer_id, back.producer_epoch, back.base_sequence) == (4711, 3, 100)
    assert struct.unpack_from(">i", to_kafka_batches(stored), 12)[0] == 9  # the partition leader epoch
    got = [(record.offset, record.key, record.value, record.timestamp, record.headers) for record in back]
    expected = [
        (500 + delta, key, value, BASE_TIME + timestamp, list(record_headers))
        for delta, (key, value, timestamp, record_headers) in enumerate(batch_records)
    ]
    assert got == expected


def test_batches_back_to_back_each_keep_their_offsets_and_the_transactional_bit() -> None:
    first = _theirs([(b"a", b"1", 0, [])], 0, producer=(7, 0, 0), txn=True)
    second = _theirs([(b"b", b"2", 1, []), (b"c", b"3", 2, [])], 3, producer=(7, 0, 1), txn=True)
    stored = _stored_at(from_kafka_batches(first + second), 10, 1)
    assert [batch.offsets for batch in decode_batches(stored)] == [[10], [11, 12]]
    wire = to_kafka_batches(stored)
    one = TheirBatch(wire)
    assert one.is_transactional and one.base_offset == 10
    two = TheirBatch(wire[12 + struct.unpack_from(">i", wire, 8)[0] :])
    assert two.base_offset == 11 and [record.value for record in two] == [b"2", b"3"]


def test_a_control_batch_goes_out_as_one_with_its_marker_and_a_compacted_batch_keeps_its_span() -> None:
    marker = encode_marker(42, 1, Marker(ControlType.COMMIT, 5), timestamp=BASE_TIME, base_offset=30)
    wire = TheirBatch(to_kafka_batches(marker))
    assert wire.is_control_batch and wire.is_transactional and wire.producer_id == 42
    assert wire.validate_crc()
    assert [record.key for record in wire] == [b"\x00\x00\x00\x01"]  # version 0, COMMIT
    compacted = encode_batch([b"kept"], keys=[b"k"], offset_deltas=[3], last_offset_delta=9, base_offset=100)
    kept = TheirBatch(to_kafka_batches(compacted))
    assert kept.validate_crc() and kept.next_offset == 110  # consumers step over the removed records
    assert [record.offset for record in kept] == [103]


def test_a_read_cut_inside_a_batch_sends_the_whole_ones_only() -> None:
    stored = _stored_at(from_kafka_batches(_theirs([(None, b"x", 0, [])], 0) * 2), 0, 0)
    cut = stored[: len(stored) - 5]
    wire = to_kafka_batches(cut)
    assert [record.offset for record in TheirBatch(wire)] == [0]
    assert len(wire) == 12 + struct.unpack_from(">i", wire, 8)[0]


def test_a_batch_failing_its_crc_is_refused_as_corrupt() -> None:
    sent = bytearray(_theirs([(b"k", b"value", 0, [])], 0))
    sent[-1] ^= 0x01
    with pytest.raises(CorruptRecordError, match="CRC"):
        from_kafka_batches(bytes(sent))


def test_an_old_message_format_and_a_cut_batch_are_refused() -> None:
    sent = bytearray(_theirs([(b"k", b"value", 0, [])], 0))
    old = bytes(sent[:16]) + b"\x01" + bytes(sent[17:])
    with pytest.raises(InvalidRecordError, match="magic 2"):
        from_kafka_batches(old)
    with pytest.raises(CorruptRecordError):
        from_kafka_batches(bytes(sent[:-3]))
    with pytest.raises(CorruptRecordError):
        from_kafka_batches(bytes(sent) + b"\x00" * 20)
