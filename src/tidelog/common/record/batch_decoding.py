"""Decoding and checking record batches (layout in batch_layout.py). Every length and count a
batch declares is checked against its size and the decoder's bounds before it is used, so a
corrupt or hostile batch is refused with CorruptRecordError (or InvalidRecordError) and never
read past its end, whatever its header says (tests/common/record: properties and a fuzzer)."""

from __future__ import annotations

import functools
import itertools
import operator
import struct
from typing import Final, NamedTuple

import numpy as np
import numpy.typing as npt

from tidelog.common.errors import CorruptRecordError, InvalidRecordError, RecordTooLargeError
from tidelog.common.record.batch_layout import (
    BATCH_OVERHEAD,
    COMPRESSION_MASK,
    HEADER_KEY,
    HEADER_VALUE,
    INT32,
    INT64,
    KNOWN_ATTRIBUTE_BITS,
    LOG_OVERHEAD,
    MAGIC,
    NO_HEADERS,
    RECORD_COLUMNS_BYTES,
    RECORDS_PER_BATCH_MAX,
    TIMESTAMP_TYPE_BIT,
    UNCOMPRESSED_BYTES_MAX,
    UNCOMPRESSED_LENGTH,
    BatchHeader,
    Buffer,
    Header,
    Headers,
    RecordBatch,
    batch_crc,
    iter_headers,
    read_header,
)
from tidelog.common.record.compression import CompressionType, decompress


def validate_batch(
    buffer: Buffer, position: int = 0, *, max_bytes: int | None = None, verify_crc: bool = True
) -> BatchHeader:
    """Check the framing, magic and CRC of the batch at `position`, cheaply (no decoding).

    Raises CorruptRecordError for a torn or corrupt batch and InvalidRecordError for a well-formed
    one that breaks a rule. This is what the log runs on every append and every recovered batch.
    Without `verify_crc` (bytes the log already checked) every other check still runs.
    """
    available = len(buffer) - position
    if available < BATCH_OVERHEAD:
        raise CorruptRecordError(f"{available} bytes cannot hold a {BATCH_OVERHEAD}-byte batch header")
    return check_header(buffer, position, read_header(buffer, position), max_bytes=max_bytes, verify_crc=verify_crc)


def check_header(
    buffer: Buffer, position: int, header: BatchHeader, *, max_bytes: int | None = None, verify_crc: bool = True
) -> BatchHeader:
    """validate_batch's checks of a header already read from `buffer` at `position` (one
    iter_headers gave: reading it again cost a fetch's reader a microsecond a batch)."""
    available = len(buffer) - position
    if header.batch_length < BATCH_OVERHEAD - LOG_OVERHEAD:
        raise CorruptRecordError(f"batch_length {header.batch_length} is shorter than a header")
    if header.size > available:
        raise CorruptRecordError(f"batch of {header.size} bytes but only {available} bytes follow")
    if max_bytes is not None and header.size > max_bytes:
        raise RecordTooLargeError(f"batch of {header.size} bytes exceeds the limit of {max_bytes}")
    if header.magic != MAGIC:
        raise InvalidRecordError(f"magic {header.magic} is not the supported magic {MAGIC}")
    if verify_crc:
        actual = batch_crc(buffer, position, header.size)
        if actual != header.crc:
            raise CorruptRecordError(f"CRC32C mismatch: stored {header.crc:#010x}, computed {actual:#010x}")
    if header.attributes & ~KNOWN_ATTRIBUTE_BITS or header.attributes & COMPRESSION_MASK > 4:
        raise InvalidRecordError(f"unknown attribute bits {header.attributes:#06x}")
    if not 0 < header.record_count <= RECORDS_PER_BATCH_MAX:
        raise InvalidRecordError(f"record_count {header.record_count} is out of range")
    if header.last_offset_delta < header.record_count - 1:
        raise InvalidRecordError(
            f"last_offset_delta {header.last_offset_delta} too small for {header.record_count} records"
        )
    return header


def records_section(buffer: Buffer, position: int, header: BatchHeader) -> bytes:
    """The batch's records section (its columns and blobs), inflated if compressed."""
    start = position + BATCH_OVERHEAD
    end = position + header.size
    codec = header.attributes & COMPRESSION_MASK  # an int compare: the enum costs µs a batch
    if codec == CompressionType.NONE:
        return bytes(buffer[start:end])
    if end - start < UNCOMPRESSED_LENGTH.size:
        raise CorruptRecordError("compressed section too short for its length prefix")
    (uncompressed_length,) = UNCOMPRESSED_LENGTH.unpack_from(buffer, start)
    if not 0 <= uncompressed_length <= UNCOMPRESSED_BYTES_MAX:
        raise CorruptRecordError(f"declared uncompressed length {uncompressed_length} out of range")
    return decompress(
        CompressionType(codec), memoryview(buffer)[start + UNCOMPRESSED_LENGTH.size : end], uncompressed_length
    )


def _slice_column(blob: bytes, lengths: npt.NDArray[np.int32], base: int) -> tuple[list[bytes | None], int]:
    """Cut `blob[base:]` into items by `lengths` (-1 = None); returns items and bytes used."""
    count = len(lengths)
    if count and int(lengths.max()) < 0:  # the common keyless batch: no bytes at all
        return [None] * count, 0
    sizes = np.maximum(lengths, 0, dtype=np.int64)
    ends = np.cumsum(sizes)
    total = int(ends[-1]) if count else 0
    ends += base
    end_list = ends.tolist()
    start_list = (ends - sizes).tolist()
    if int(lengths.min()) >= 0:
        return list(map(blob.__getitem__, map(slice, start_list, end_list))), total
    return [
        None if length < 0 else blob[start:end]
        for start, end, length in zip(start_list, end_list, lengths.tolist(), strict=True)
    ], total


def _decode_headers(blob: bytes, lengths: list[int], base: int) -> list[Headers]:
    result: list[Headers] = []
    position = base
    for length in lengths:
        if length == 0:
            result.append(NO_HEADERS)
            continue
        end = position + length
        if end > len(blob):
            raise CorruptRecordError("record headers overrun the records section")
        record_headers: list[Header] = []
        # Every length is checked against this record's end before it is used: a hostile batch
        # (its CRC is easy to compute) gets a CorruptRecordError, never a struct or Unicode error.
        while position < end:
            if position + HEADER_KEY.size + HEADER_VALUE.size > end:
                raise CorruptRecordError("record headers overrun their declared length")
            (name_length,) = HEADER_KEY.unpack_from(blob, position)
            position += HEADER_KEY.size
            if position + name_length + HEADER_VALUE.size > end:
                raise CorruptRecordError("a header name overruns its record's headers")
            try:
                name = blob[position : position + name_length].decode()
            except UnicodeDecodeError as error:
                raise CorruptRecordError(f"a header name is not UTF-8: {error}") from None
            position += name_length
            (value_length,) = HEADER_VALUE.unpack_from(blob, position)
            position += HEADER_VALUE.size
            if value_length < 0:
                record_headers.append((name, None))
            else:
                if position + value_length > end:
                    raise CorruptRecordError("a header value overruns its record's headers")
                record_headers.append((name, blob[position : position + value_length]))
                position += value_length
        if position != end:
            raise CorruptRecordError("record headers overrun their declared length")
        result.append(tuple(record_headers))
    return result


class _Columns(NamedTuple):
    section: bytes
    offset_deltas: npt.NDArray[np.int32]
    timestamp_deltas: npt.NDArray[np.int64]
    key_lengths: npt.NDArray[np.int32]
    value_lengths: npt.NDArray[np.int32]
    header_lengths: npt.NDArray[np.int32]
    columns_end: int
    key_bytes: int
    value_bytes: int
    header_bytes: int

    @property
    def payload(self) -> int:
        return self.key_bytes + self.value_bytes + self.header_bytes


def _columns(buffer: Buffer, position: int, header: BatchHeader) -> _Columns:
    """Inflate the records section and check that its columns agree with each other."""
    section = records_section(buffer, position, header)
    count = header.record_count
    columns_end = count * RECORD_COLUMNS_BYTES
    if len(section) < columns_end:
        raise CorruptRecordError(f"records section of {len(section)} bytes cannot hold {count} records")
    offset_deltas = np.frombuffer(section, dtype=INT32, count=count, offset=0)
    timestamp_deltas = np.frombuffer(section, dtype=INT64, count=count, offset=4 * count)
    key_lengths = np.frombuffer(section, dtype=INT32, count=count, offset=12 * count)
    value_lengths = np.frombuffer(section, dtype=INT32, count=count, offset=16 * count)
    header_lengths = np.frombuffer(section, dtype=INT32, count=count, offset=20 * count)
    if int(key_lengths.min()) < -1 or int(value_lengths.min()) < -1 or int(header_lengths.min()) < 0:
        raise CorruptRecordError("negative key, value or headers length")
    key_bytes = int(np.maximum(key_lengths, 0).sum(dtype=np.int64))
    value_bytes = int(np.maximum(value_lengths, 0).sum(dtype=np.int64))
    header_bytes = int(header_lengths.sum(dtype=np.int64))
    payload = key_bytes + value_bytes + header_bytes
    if columns_end + payload != len(section):
        raise CorruptRecordError(
            f"records section is {len(section)} bytes, its columns account for {columns_end + payload}"
        )
    if count > 1 and int(np.diff(offset_deltas.astype(np.int64)).min()) <= 0:  # int32 differences can wrap
        raise CorruptRecordError("offset deltas are not strictly increasing")
    if int(offset_deltas[0]) < 0 or int(offset_deltas[-1]) > header.last_offset_delta:
        raise CorruptRecordError("offset deltas fall outside the batch's offset range")
    return _Columns(
        section,
        offset_deltas,
        timestamp_deltas,
        key_lengths,
        value_lengths,
        header_lengths,
        columns_end,
        key_bytes,
        value_bytes,
        header_bytes,
    )


def check_records(
    buffer: Buffer,
    position: int,
    header: BatchHeader,
    *,
    contiguous_offsets: bool = False,
    require_keys: bool = False,
) -> None:
    """Check a validated batch's records section without building Python objects per record.

    `contiguous_offsets`: offset deltas must be exactly 0..N-1 (what a producer sends).
    `require_keys`: no record may have a null key (compacted topics).
    """
    columns = _columns(buffer, position, header)
    count = header.record_count
    if contiguous_offsets and (header.last_offset_delta != count - 1 or int(columns.offset_deltas[-1]) != count - 1):
        # strictly increasing deltas from 0 that end at N-1 can only be 0..N-1
        raise InvalidRecordError("a producer batch must number its records 0..N-1")
    if contiguous_offsets and int(columns.offset_deltas[0]) != 0:
        raise InvalidRecordError("a producer batch must number its records 0..N-1")
    if require_keys and int(columns.key_lengths.min()) < 0:
        raise InvalidRecordError("compacted topics require a key on every record")


SMALL_BATCH_RECORDS: Final = 64  # up to this many records, struct's one call beats numpy's dozen


@functools.lru_cache(maxsize=SMALL_BATCH_RECORDS)
def _small_columns(count: int) -> struct.Struct:
    """The five fixed-width columns of `count` records, read in one call (batch_layout.py)."""
    return struct.Struct(f"<{count}i{count}q{3 * count}i")


@functools.lru_cache(maxsize=SMALL_BATCH_RECORDS)
def _uniform_columns(count: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """0..count-1 and count zeros: a producer's offset deltas, and its timestamp deltas when every
    record has the batch's timestamp, each recognised by one tuple comparison."""
    return tuple(range(count)), (0,) * count


FIXED_ITEM_LAYOUTS: Final = 256  # (count, length) pairs whose unpacker is kept


@functools.lru_cache(maxsize=FIXED_ITEM_LAYOUTS)
def _fixed_items(count: int, length: int) -> struct.Struct:
    """`count` items of `length` bytes back to back, cut in one call (fixed-size keys and values)."""
    return struct.Struct(f"{length}s" * count)


def _column_bytes(lengths: tuple[int, ...]) -> int:
    """The bytes a key or value column's items take (-1 is a null item, taking none)."""
    first = lengths[0]
    if lengths.count(first) == len(lengths):  # every item of one size, or every one null: one check
        if first < -1:
            raise CorruptRecordError("negative key, value or headers length")
        return max(first, 0) * len(lengths)
    if min(lengths) < -1:
        raise CorruptRecordError("negative key, value or headers length")
    return sum(lengths) + lengths.count(-1)


def _as_int64(values: list[int]) -> list[int]:
    """As numpy's int64 arithmetic leaves them (a hostile batch's deltas can overflow): both
    decoders give one answer for every input."""
    if values and (min(values) < -(2**63) or max(values) >= 2**63):
        return [(value + 2**63) % 2**64 - 2**63 for value in values]
    return values


def _decode_small(buffer: Buffer, position: int, header: BatchHeader) -> RecordBatch:
    """decode_batch for a batch of a few records: the checks and results of `_columns` and
    `_decode_columnar`, on Python ints (numpy's per-call cost was most of a small batch's decode).
    A producer's batch (offsets 0..N-1, one timestamp, fixed-size or null keys and values) takes
    the short paths: a tuple comparison each instead of a pass over the records."""
    section = records_section(buffer, position, header)
    count = header.record_count
    columns_end = count * RECORD_COLUMNS_BYTES
    if len(section) < columns_end:
        raise CorruptRecordError(f"records section of {len(section)} bytes cannot hold {count} records")
    fields = _small_columns(count).unpack_from(section, 0)
    offset_deltas = fields[:count]
    timestamp_deltas = fields[count : 2 * count]
    key_lengths = fields[2 * count : 3 * count]
    value_lengths = fields[3 * count : 4 * count]
    header_lengths = fields[4 * count :]
    key_bytes = _column_bytes(key_lengths)
    value_bytes = _column_bytes(value_lengths)
    contiguous, zeros = _uniform_columns(count)
    if header_lengths == zeros:
        header_bytes = 0
    else:
        if min(header_lengths) < 0:
            raise CorruptRecordError("negative key, value or headers length")
        header_bytes = sum(header_lengths)
    payload = key_bytes + value_bytes + header_bytes
    if columns_end + payload != len(section):
        raise CorruptRecordError(
            f"records section is {len(section)} bytes, its columns account for {columns_end + payload}"
        )
    base = header.base_offset
    if offset_deltas == contiguous:  # 0..N-1 is strictly increasing and ends within last_offset_delta
        offsets = list(range(base, base + count))
    else:
        if not all(map(operator.lt, offset_deltas, offset_deltas[1:])):
            raise CorruptRecordError("offset deltas are not strictly increasing")
        if offset_deltas[0] < 0 or offset_deltas[-1] > header.last_offset_delta:
            raise CorruptRecordError("offset deltas fall outside the batch's offset range")
        offsets = list(map(base.__add__, offset_deltas))
    if not -(2**63) <= base <= 2**63 - 1 - header.last_offset_delta:  # deltas lie in 0..last_offset_delta
        offsets = _as_int64(offsets)
    keys = _slice_small(section, key_lengths, columns_end)
    values = _slice_small(section, value_lengths, columns_end + key_bytes)
    if header.attributes & TIMESTAMP_TYPE_BIT:
        timestamps = [header.max_timestamp] * count
    elif timestamp_deltas == zeros:
        timestamps = [header.first_timestamp] * count
    else:
        timestamps = _as_int64(list(map(header.first_timestamp.__add__, timestamp_deltas)))
    if header_bytes == 0:
        record_headers = [NO_HEADERS] * count
    else:
        record_headers = _decode_headers(section, list(header_lengths), columns_end + key_bytes + value_bytes)
    return RecordBatch(header, offsets, timestamps, keys, values, record_headers)


def _slice_small(blob: bytes, lengths: tuple[int, ...], base: int) -> list[bytes | None]:
    """Cut `blob[base:]` into items by `lengths` (checked by `_column_bytes`; -1 = None)."""
    first = lengths[0]
    if lengths.count(first) == len(lengths):  # fixed-size items (one unpack) or all null (keyless)
        return [None] * len(lengths) if first < 0 else list(_fixed_items(len(lengths), first).unpack_from(blob, base))
    if min(lengths) >= 0:
        ends = list(itertools.accumulate(lengths, initial=base))
        return list(map(blob.__getitem__, map(slice, ends, ends[1:])))
    items: list[bytes | None] = []
    for length in lengths:
        if length < 0:
            items.append(None)
        else:
            items.append(blob[base : base + length])
            base += length
    return items


def decode_batch(buffer: Buffer, position: int = 0, *, verify_crc: bool = True) -> RecordBatch:
    """Decode the batch at `position` into columns of Python objects."""
    return _decode_checked(buffer, position, validate_batch(buffer, position, verify_crc=verify_crc))


def _decode_checked(buffer: Buffer, position: int, header: BatchHeader) -> RecordBatch:
    if header.record_count <= SMALL_BATCH_RECORDS:
        return _decode_small(buffer, position, header)
    return _decode_columnar(buffer, position, header)


def _decode_columnar(buffer: Buffer, position: int, header: BatchHeader) -> RecordBatch:
    """decode_batch with numpy's column operations (batches of more than a few records)."""
    columns = _columns(buffer, position, header)
    count = header.record_count
    section = columns.section
    keys, keys_size = _slice_column(section, columns.key_lengths, columns.columns_end)
    values, values_size = _slice_column(section, columns.value_lengths, columns.columns_end + keys_size)
    if header.attributes & TIMESTAMP_TYPE_BIT:
        timestamps = [header.max_timestamp] * count
    else:
        timestamps = (columns.timestamp_deltas + header.first_timestamp).tolist()
    if columns.payload == keys_size + values_size:
        record_headers = [NO_HEADERS] * count
    else:
        record_headers = _decode_headers(
            section, columns.header_lengths.tolist(), columns.columns_end + keys_size + values_size
        )
    return RecordBatch(
        header=header,
        offsets=(columns.offset_deltas.astype(np.int64) + header.base_offset).tolist(),
        timestamps=timestamps,
        keys=keys,
        values=values,
        headers=record_headers,
    )


class BatchColumns(NamedTuple):
    """A batch's records as numpy columns over its records section, with no object per record:
    for bulk consumers that hand columns on (Arrow). A null key or value has length -1; each
    blob holds the non-null items back to back, in record order."""

    header: BatchHeader
    offsets: npt.NDArray[np.int64]
    timestamps: npt.NDArray[np.int64]
    key_lengths: npt.NDArray[np.int32]
    value_lengths: npt.NDArray[np.int32]
    header_lengths: npt.NDArray[np.int32]
    keys: memoryview
    values: memoryview
    headers: memoryview


def decode_columns(buffer: Buffer, position: int = 0, *, verify_crc: bool = True) -> BatchColumns:
    """The batch at `position` as columns (checked as `decode_batch` checks it)."""
    header = validate_batch(buffer, position, verify_crc=verify_crc)
    columns = _columns(buffer, position, header)
    section = memoryview(columns.section)
    keys_end = columns.columns_end + columns.key_bytes
    values_end = keys_end + columns.value_bytes
    if header.attributes & TIMESTAMP_TYPE_BIT:
        timestamps = np.full(header.record_count, header.max_timestamp, dtype=INT64)
    else:
        timestamps = columns.timestamp_deltas + header.first_timestamp
    return BatchColumns(
        header,
        columns.offset_deltas.astype(INT64) + header.base_offset,
        timestamps,
        columns.key_lengths,
        columns.value_lengths,
        columns.header_lengths,
        section[columns.columns_end : keys_end],
        section[keys_end:values_end],
        section[values_end:],
    )


def decode_headers(columns: BatchColumns, low: int, high: int) -> list[Headers]:
    """Records low..high-1's headers, from a batch's columns (a loop per header: the slow field)."""
    base = int(columns.header_lengths[:low].sum(dtype=np.int64))
    blob = bytes(columns.headers)
    return _decode_headers(blob, columns.header_lengths[low:high].tolist(), base)


def decode_batches(buffer: Buffer, *, verify_crc: bool = True) -> list[RecordBatch]:
    """Decode every batch in a buffer of batches back to back (CRC-checked unless checked before)."""
    return [
        _decode_checked(buffer, position, check_header(buffer, position, header, verify_crc=verify_crc))
        for position, header in iter_headers(buffer)
    ]
