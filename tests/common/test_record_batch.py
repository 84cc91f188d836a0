from __future__ import annotations

import struct

import crc32c
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidelog.common.errors import CorruptRecordError, InvalidRecordError, RecordTooLargeError
from tidelog.common.record.batch import (
    BATCH_OVERHEAD,
    CRC_POSITION,
    CRC_START,
    RECORD_COLUMNS_BYTES,
    TimestampType,
    batch_crc,
    check_records,
    decode_batch,
    decode_batches,
    decode_columns,
    decode_headers,
    encode_batch,
    iter_headers,
    read_header,
    restamp,
    validate_batch,
)
from tidelog.common.record.batch_decoding import _decode_columnar, _decode_small
from tidelog.common.record.compression import CompressionType

optional_bytes = st.one_of(st.none(), st.binary(max_size=64))
header_lists = st.lists(st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=16))), max_size=3).map(
    tuple
)


def _fix_crc(batch: bytearray) -> bytearray:
    head = crc32c.crc32c(bytes(batch[:CRC_POSITION]))
    struct.pack_into("<I", batch, CRC_POSITION, crc32c.crc32c(bytes(batch[CRC_START:]), head))
    return batch


@st.composite
def batches(draw: st.DrawFn) -> dict[str, object]:
    count = draw(st.integers(min_value=1, max_value=40))
    values = draw(st.lists(optional_bytes, min_size=count, max_size=count))
    keys = draw(st.one_of(st.none(), st.lists(optional_bytes, min_size=count, max_size=count)))
    timestamps = draw(st.lists(st.integers(min_value=0, max_value=2**50), min_size=count, max_size=count))
    headers = draw(st.one_of(st.none(), st.lists(header_lists, min_size=count, max_size=count)))
    compression = draw(st.sampled_from(list(CompressionType)))
    return {"values": values, "keys": keys, "timestamps": timestamps, "headers": headers, "compression": compression}


@st.composite
def uniform_batches(draw: st.DrawFn) -> dict[str, object]:
    """What producers mostly send, and the small decoder's short paths take: values (and keys)
    of one size or all null, every record at the batch's timestamp or not, no headers."""
    count = draw(st.integers(min_value=1, max_value=40))

    def column() -> list[bytes | None]:
        size = draw(st.one_of(st.none(), st.integers(min_value=0, max_value=24)))
        return [None if size is None else draw(st.binary(min_size=size, max_size=size)) for _ in range(count)]

    first = draw(st.integers(min_value=0, max_value=2**50))
    one_time = draw(st.booleans())
    return {
        "values": column(),
        "keys": column() if draw(st.booleans()) else None,
        "timestamps": [first] * count if one_time else [first + index for index in range(count)],
        "headers": None,
        "compression": CompressionType.NONE,
    }


any_batches = st.one_of(batches(), uniform_batches())


@given(any_batches, st.integers(min_value=0, max_value=2**40))
def test_decode_returns_what_was_encoded(fields: dict[str, object], base_offset: int) -> None:
    encoded = encode_batch(base_offset=base_offset, **fields)  # type: ignore[arg-type]
    batch = decode_batch(encoded)
    values = fields["values"]
    assert isinstance(values, list)
    count = len(values)
    assert batch.values == values
    assert batch.keys == (fields["keys"] or [None] * count)
    assert batch.timestamps == fields["timestamps"]
    assert batch.headers == (fields["headers"] or [()] * count)
    assert batch.offsets == list(range(base_offset, base_offset + count))
    assert batch.header.record_count == count
    assert batch.header.max_timestamp == max(fields["timestamps"])
    assert batch.header.compression == fields["compression"]
    assert batch.header.size == len(encoded)


@given(batches(), st.integers(min_value=0, max_value=2**40), st.data())
def test_columns_say_what_the_decoded_batch_says(
    fields: dict[str, object], base_offset: int, data: st.DataObject
) -> None:
    encoded = encode_batch(base_offset=base_offset, **fields)  # type: ignore[arg-type]
    model = decode_batch(encoded)
    columns = decode_columns(encoded)
    count = len(model)
    assert columns.header == model.header
    assert columns.offsets.tolist() == model.offsets and columns.timestamps.tolist() == model.timestamps

    def items(lengths: object, blob: memoryview) -> list[bytes | None]:
        found, at = [], 0
        for length in lengths.tolist():  # type: ignore[attr-defined]
            found.append(None if length < 0 else bytes(blob[at : at + length]))
            at += max(length, 0)
        assert at == len(blob)  # the blob holds exactly the non-null items
        return found

    assert items(columns.key_lengths, columns.keys) == model.keys
    assert items(columns.value_lengths, columns.values) == model.values
    low = data.draw(st.integers(min_value=0, max_value=count))
    high = data.draw(st.integers(min_value=low, max_value=count))
    assert decode_headers(columns, low, high) == model.headers[low:high]


def _either(decode: object, data: bytes) -> object:
    """A decoder's batch, or the kind and message of its refusal."""
    try:
        header = validate_batch(data, verify_crc=False)
        return decode(data, 0, header)  # type: ignore[operator]
    except (CorruptRecordError, InvalidRecordError, RecordTooLargeError) as error:
        return type(error), error.message


@given(any_batches, st.integers(min_value=0, max_value=2**62), st.data())
def test_the_small_batch_decoder_and_the_columnar_one_agree_on_any_bytes(
    fields: dict[str, object], base_offset: int, data: st.DataObject
) -> None:
    # decode_batch takes struct's path up to SMALL_BATCH_RECORDS records and numpy's beyond:
    # on a batch with any of its record columns overwritten, both give one answer.
    fields["compression"] = CompressionType.NONE  # the columns lie in the bytes as they are
    encoded = bytearray(encode_batch(base_offset=base_offset, **fields))  # type: ignore[arg-type]
    for _ in range(data.draw(st.integers(min_value=0, max_value=4))):
        at = data.draw(st.integers(min_value=BATCH_OVERHEAD, max_value=len(encoded) - 4))
        value = data.draw(st.sampled_from([-2, -1, 0, 1, 7, 2**31 - 1, -(2**31)]) | st.integers(-(2**31), 2**31 - 1))
        struct.pack_into("<i", encoded, at, value)
    assert _either(_decode_small, bytes(encoded)) == _either(_decode_columnar, bytes(encoded))


def test_offset_deltas_that_wrap_in_32_bits_are_not_taken_for_increasing() -> None:
    encoded = bytearray(encode_batch([b"a", b"b"]))
    struct.pack_into("<ii", encoded, BATCH_OVERHEAD, 2**31 - 1, -(2**31))  # their int32 difference wraps to 1
    for decode in (_decode_small, _decode_columnar):
        assert _either(decode, bytes(encoded)) == (CorruptRecordError, "offset deltas are not strictly increasing")


def test_columns_of_a_log_append_time_batch_carry_its_time() -> None:
    batch = bytearray(encode_batch([b"a", b"b"], timestamps=[5, 6]))
    restamp(batch, base_offset=7, partition_leader_epoch=0, log_append_time=99)
    columns = decode_columns(batch)
    assert columns.timestamps.tolist() == [99, 99] and columns.offsets.tolist() == [7, 8]


def test_records_iterate_as_tuples() -> None:
    batch = decode_batch(encode_batch([b"a", None], keys=[b"k", None], timestamps=[5, 7], base_offset=10))
    assert [tuple(record) for record in batch.records()] == [(10, 5, b"k", b"a", ()), (11, 7, None, None, ())]


def test_one_timestamp_for_all_records() -> None:
    batch = decode_batch(encode_batch([b"a", b"b"], timestamps=42))
    assert batch.timestamps == [42, 42]


def test_log_append_time_overrides_record_timestamps() -> None:
    encoded = bytearray(encode_batch([b"a", b"b"], timestamps=[1, 2]))
    restamp(encoded, base_offset=7, partition_leader_epoch=3, log_append_time=99)
    batch = decode_batch(encoded)
    assert batch.timestamps == [99, 99]
    assert batch.header.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert (batch.header.base_offset, batch.header.partition_leader_epoch) == (7, 3)


def test_restamping_offsets_re_checksums_the_batch() -> None:
    encoded = bytearray(encode_batch([b"x"] * 3))
    crc_before = read_header(encoded).crc
    restamp(encoded, base_offset=1000, partition_leader_epoch=5)
    assert read_header(encoded).crc == batch_crc(encoded) != crc_before
    assert decode_batch(encoded).offsets == [1000, 1001, 1002]


@pytest.mark.parametrize("position", [0, 7, 12, 15], ids=["offset-low", "offset-high", "epoch-low", "epoch-high"])
def test_crc_covers_base_offset_and_leader_epoch(position: int) -> None:
    encoded = bytearray(encode_batch([b"x"] * 3, base_offset=10))
    encoded[position] ^= 0x40
    with pytest.raises(CorruptRecordError, match="CRC32C mismatch"):
        validate_batch(encoded)


def test_compaction_style_offset_gaps_are_kept() -> None:
    encoded = encode_batch([b"a", b"c"], offset_deltas=[0, 2], last_offset_delta=4, base_offset=100)
    batch = decode_batch(encoded)
    assert batch.offsets == [100, 102]
    assert batch.header.next_offset == 105
    with pytest.raises(InvalidRecordError, match=r"0\.\.N-1"):
        check_records(encoded, 0, batch.header, contiguous_offsets=True)


def test_every_codec_shrinks_repetitive_values() -> None:
    values = [b"the same hundred bytes " * 4] * 200
    plain = len(encode_batch(values))
    for codec in CompressionType:
        if codec != CompressionType.NONE:
            encoded = encode_batch(values, compression=codec)
            assert len(encoded) < plain / 4, codec
            assert decode_batch(encoded).values == values


# ---- bad input -------------------------------------------------------------------------------


def test_flipped_byte_fails_the_crc() -> None:
    encoded = bytearray(encode_batch([b"hello"] * 5))
    encoded[-3] ^= 0x40
    with pytest.raises(CorruptRecordError, match="CRC32C mismatch"):
        validate_batch(encoded)
    with pytest.raises(CorruptRecordError):
        decode_batch(encoded)


def test_wrong_magic_is_rejected() -> None:
    encoded = bytearray(encode_batch([b"hello"]))
    encoded[16] = 2
    with pytest.raises(InvalidRecordError, match="magic 2"):
        validate_batch(encoded)


def test_batch_length_past_the_buffer_is_rejected() -> None:
    encoded = bytearray(encode_batch([b"hello"]))
    struct.pack_into("<i", encoded, 8, len(encoded))
    with pytest.raises(CorruptRecordError, match="only"):
        validate_batch(encoded)


def test_batch_length_shorter_than_a_header_is_rejected() -> None:
    encoded = bytearray(encode_batch([b"hello"]))
    struct.pack_into("<i", encoded, 8, 3)
    with pytest.raises(CorruptRecordError, match="shorter than a header"):
        validate_batch(encoded)


def test_truncated_header_is_rejected() -> None:
    with pytest.raises(CorruptRecordError, match="cannot hold"):
        validate_batch(encode_batch([b"hello"])[: BATCH_OVERHEAD - 1])


def test_column_lengths_that_disagree_with_the_section_are_rejected() -> None:
    encoded = bytearray(encode_batch([b"hello", b"world"]))
    value_lengths_at = BATCH_OVERHEAD + 16 * 2  # after offset, timestamp and key columns
    struct.pack_into("<i", encoded, value_lengths_at, 6)
    with pytest.raises(CorruptRecordError, match="columns account for"):
        decode_batch(_fix_crc(encoded))


def test_record_count_beyond_the_section_is_rejected() -> None:
    encoded = bytearray(encode_batch([b"hello"]))
    struct.pack_into("<i", encoded, 57, 1000)
    struct.pack_into("<i", encoded, 23, 999)
    with pytest.raises(CorruptRecordError, match="cannot hold 1000 records"):
        decode_batch(_fix_crc(encoded))


def test_offset_deltas_must_grow() -> None:
    encoded = bytearray(encode_batch([b"a", b"b"]))
    struct.pack_into("<i", encoded, BATCH_OVERHEAD + 4, 0)
    with pytest.raises(CorruptRecordError, match="strictly increasing"):
        decode_batch(_fix_crc(encoded))


def test_unknown_attribute_bits_are_rejected() -> None:
    encoded = bytearray(encode_batch([b"a"]))
    struct.pack_into("<h", encoded, 21, 0x100)
    with pytest.raises(InvalidRecordError, match="attribute"):
        validate_batch(_fix_crc(encoded))


def test_oversized_batch_is_rejected_with_its_own_error() -> None:
    encoded = encode_batch([b"x" * 1000])
    with pytest.raises(RecordTooLargeError):
        validate_batch(encoded, max_bytes=len(encoded) - 1)
    assert validate_batch(encoded, max_bytes=len(encoded)).size == len(encoded)


def test_compressed_section_that_inflates_past_its_declared_length_is_rejected() -> None:
    encoded = bytearray(encode_batch([b"a" * 1000], compression=CompressionType.ZSTD))
    declared_at = BATCH_OVERHEAD
    (declared,) = struct.unpack_from("<i", encoded, declared_at)
    struct.pack_into("<i", encoded, declared_at, declared - 10)
    with pytest.raises(CorruptRecordError):
        decode_batch(_fix_crc(encoded))


@pytest.mark.parametrize("codec", [c for c in CompressionType if c != CompressionType.NONE])
def test_garbage_compressed_section_is_a_corrupt_record(codec: CompressionType) -> None:
    encoded = bytearray(encode_batch([b"a" * 100] * 10, compression=codec))
    for position in range(BATCH_OVERHEAD + 4, len(encoded)):
        encoded[position] = 0xAB
    with pytest.raises(CorruptRecordError):
        decode_batch(_fix_crc(encoded))


def test_empty_batch_cannot_be_encoded() -> None:
    with pytest.raises(InvalidRecordError):
        encode_batch([])


def test_mismatched_column_lengths_cannot_be_encoded() -> None:
    with pytest.raises(InvalidRecordError):
        encode_batch([b"a", b"b"], keys=[b"k"])
    with pytest.raises(InvalidRecordError):
        encode_batch([b"a", b"b"], timestamps=[1])


def test_compacted_topics_need_keys() -> None:
    encoded = encode_batch([b"a", b"b"], keys=[b"k", None])
    with pytest.raises(InvalidRecordError, match="key"):
        check_records(encoded, 0, read_header(encoded), require_keys=True)


def test_fixed_overhead_per_record_is_documented_size() -> None:
    one = len(encode_batch([b""]))
    two = len(encode_batch([b"", b""]))
    assert two - one == RECORD_COLUMNS_BYTES


def test_a_buffer_of_batches_splits_into_batches() -> None:
    buffer = encode_batch([b"a"], base_offset=0) + encode_batch([b"b", b"c"], base_offset=1)
    assert [position for position, _ in iter_headers(buffer)] == [0, len(encode_batch([b"a"]))]
    assert [batch.offsets for batch in decode_batches(buffer)] == [[0], [1, 2]]
    with pytest.raises(CorruptRecordError, match="overruns"):
        list(iter_headers(buffer[:-1]))
    with pytest.raises(CorruptRecordError, match="stray"):
        list(iter_headers(buffer + b"xyz"))
