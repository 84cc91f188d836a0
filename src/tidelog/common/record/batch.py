"""The record batch: Tidelog's unit of storage, replication and transfer.

Byte layout (all integers little-endian; docs/record-format.md is the full specification):

    offset size field
         0    8 base_offset              int64   offset of the batch's first record
         8    4 batch_length             int32   bytes after this field (whole batch = 12 + this)
        12    4 partition_leader_epoch   int32   set by the leader on append
        16    1 magic                    int8    = 1
        17    4 crc                      uint32  CRC32C of bytes [0, 17) then [21, end)
        21    2 attributes               int16   bits 0-2 codec, 3 timestamp type,
                                                 4 transactional, 5 control
        23    4 last_offset_delta        int32
        27    8 first_timestamp          int64
        35    8 max_timestamp            int64
        43    8 producer_id              int64
        51    2 producer_epoch           int16
        53    4 base_sequence            int32
        57    4 record_count             int32
        61      records section (compressed: int32 uncompressed length, then the codec's bytes)

The records section is columnar, so a batch of N records is encoded and decoded by a handful of
bulk operations (numpy over fixed-width columns, one join and one slice per value) rather than a
per-field loop per record:

    int32 offset_delta[N] | int64 timestamp_delta[N] | int32 key_length[N] (-1 = null)
    | int32 value_length[N] (-1 = null) | int32 headers_length[N]
    | keys blob | values blob | headers blob

Unlike Kafka's, the CRC covers base_offset and partition_leader_epoch too: a flipped bit there
would otherwise move a batch to another offset unnoticed. The leader re-checksums after stamping
them (CRC32C runs at tens of GB/s; a 1 MiB batch costs ~40 µs). Everything here is pure functions
over bytes; safe from any thread.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Iterator, Sequence
from typing import Final, NamedTuple

import crc32c
import numpy as np
import numpy.typing as npt

from tidelog.common.errors import CorruptRecordError, InvalidRecordError, RecordTooLargeError
from tidelog.common.record.compression import CompressionType, compress, decompress

__all__ = [
    "BATCH_OVERHEAD",
    "HEADER",
    "MAGIC",
    "BatchColumns",
    "BatchHeader",
    "Buffer",
    "Header",
    "Record",
    "RecordBatch",
    "TimestampType",
    "batch_crc",
    "check_records",
    "decode_batch",
    "decode_batches",
    "decode_columns",
    "decode_headers",
    "encode_batch",
    "iter_headers",
    "next_sequence",
    "read_header",
    "restamp",
    "validate_batch",
]

SEQUENCE_MAX: Final = 2**31 - 1  # a batch's base sequence is an int32; sequences wrap to 0 after it


def next_sequence(sequence: int, increment: int = 1) -> int:
    """The sequence `increment` records after `sequence`: wraps from 2**31 - 1 to 0, as Kafka's do."""
    return (sequence + increment) % (SEQUENCE_MAX + 1)


MAGIC: Final = 1
HEADER: Final = struct.Struct("<qiibIhiqqqhii")
BATCH_OVERHEAD: Final = HEADER.size  # 61
LOG_OVERHEAD: Final = 12  # base_offset + batch_length: the bytes batch_length does not count
CRC_START: Final = 21
CRC_FIELD: Final = struct.Struct("<I")
BASE_OFFSET_FIELD: Final = struct.Struct("<q")
EPOCH_FIELD: Final = struct.Struct("<i")
PARTITION_LEADER_EPOCH_POSITION: Final = 12
CRC_POSITION: Final = 17
UNCOMPRESSED_LENGTH: Final = struct.Struct("<i")
RECORD_COLUMNS_BYTES: Final = 4 + 8 + 4 + 4 + 4  # fixed bytes per record in the records section
NO_TIMESTAMP: Final = -1
NO_PRODUCER_ID: Final = -1

COMPRESSION_MASK: Final = 0x07
TIMESTAMP_TYPE_BIT: Final = 0x08
TRANSACTIONAL_BIT: Final = 0x10
CONTROL_BIT: Final = 0x20
KNOWN_ATTRIBUTE_BITS: Final = COMPRESSION_MASK | TIMESTAMP_TYPE_BIT | TRANSACTIONAL_BIT | CONTROL_BIT

HEADER_KEY: Final = struct.Struct("<H")
HEADER_VALUE: Final = struct.Struct("<i")

# Bounds a decoder trusts before it reads a column: no batch may claim more records or more
# inflated bytes than these, whatever its header says.
RECORDS_PER_BATCH_MAX: Final = 1 << 22
UNCOMPRESSED_BYTES_MAX: Final = 1 << 28

_I4: Final = np.dtype("<i4")
_I8: Final = np.dtype("<i8")

Buffer = bytes | bytearray | memoryview
Header = tuple[str, bytes | None]
Headers = tuple[Header, ...]
_NO_HEADERS: Final[Headers] = ()


class TimestampType:
    CREATE_TIME: Final = 0
    LOG_APPEND_TIME: Final = 1


class BatchHeader(NamedTuple):
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    first_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        """Bytes the whole batch takes."""
        return LOG_OVERHEAD + self.batch_length

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> CompressionType:
        return CompressionType(self.attributes & COMPRESSION_MASK)

    @property
    def timestamp_type(self) -> int:
        return TimestampType.LOG_APPEND_TIME if self.attributes & TIMESTAMP_TYPE_BIT else 0

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)


class Record(NamedTuple):
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: Headers


@dataclasses.dataclass(slots=True)
class RecordBatch:
    """A decoded batch: the header plus one Python list per record field (columnar)."""

    header: BatchHeader
    offsets: list[int]
    timestamps: list[int]
    keys: list[bytes | None]
    values: list[bytes | None]
    headers: list[Headers]

    def __len__(self) -> int:
        return len(self.offsets)

    def records(self) -> Iterator[Record]:
        """The records one by one; costs a tuple per record, so bulk paths use the columns."""
        return map(Record, self.offsets, self.timestamps, self.keys, self.values, self.headers)


def read_header(buffer: Buffer, position: int = 0) -> BatchHeader:
    """Unpack the batch header at `position`; the caller checks there are 61 bytes."""
    return BatchHeader._make(HEADER.unpack_from(buffer, position))


def batch_crc(batch: Buffer, position: int = 0, size: int | None = None) -> int:
    """CRC32C of the batch at `position` over every byte but the CRC field itself."""
    view = memoryview(batch)
    end = len(view) if size is None else position + size
    head = crc32c.crc32c(view[position : position + CRC_POSITION])
    return int(crc32c.crc32c(view[position + CRC_START : end], head))


def _lengths(items: Sequence[bytes | None]) -> tuple[npt.NDArray[np.int32], bytes]:
    """Length column (-1 for None) and concatenation of the non-null items."""
    try:
        lengths = np.fromiter(map(len, items), dtype=_I4, count=len(items))  # type: ignore[arg-type]
        return lengths, b"".join(items)  # type: ignore[arg-type]
    except TypeError:  # some items are None: the slower path
        lengths = np.fromiter((-1 if item is None else len(item) for item in items), dtype=_I4, count=len(items))
        return lengths, b"".join([item for item in items if item is not None])


def _encode_headers(headers: Sequence[Headers]) -> tuple[npt.NDArray[np.int32], bytes]:
    """Each record's headers as Kafka lays them out. The hot loop does no numpy element writes and
    encodes a header name once per call (records usually share their names)."""
    parts: list[bytes] = []
    lengths: list[int] = []
    named: dict[str, bytes] = {}  # name → its length prefix and UTF-8 bytes
    pack_value = HEADER_VALUE.pack
    null_value = pack_value(-1)
    value_size = HEADER_VALUE.size
    for record_headers in headers:
        size = 0
        for name, value in record_headers:
            prefix = named.get(name)
            if prefix is None:
                encoded_name = name.encode()
                prefix = named[name] = HEADER_KEY.pack(len(encoded_name)) + encoded_name
            if value is None:
                parts += (prefix, null_value)
                size += len(prefix) + value_size
            else:
                parts += (prefix, pack_value(len(value)), value)
                size += len(prefix) + value_size + len(value)
        lengths.append(size)
    return np.array(lengths, dtype=_I4), b"".join(parts)


def encode_batch(
    values: Sequence[bytes | None],
    *,
    keys: Sequence[bytes | None] | None = None,
    timestamps: Sequence[int] | int = NO_TIMESTAMP,
    headers: Sequence[Headers] | None = None,
    offset_deltas: Sequence[int] | None = None,
    last_offset_delta: int | None = None,
    base_offset: int = 0,
    partition_leader_epoch: int = -1,
    compression: CompressionType = CompressionType.NONE,
    timestamp_type: int = TimestampType.CREATE_TIME,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
    control: bool = False,
) -> bytes:
    """Encode one batch. `timestamps` is one per record, or one int for all of them.

    `offset_deltas` defaults to 0..N-1; the log cleaner passes the survivors' deltas (and the
    original `last_offset_delta`) so compaction keeps every offset unchanged.
    """
    count = len(values)
    if count == 0:
        raise InvalidRecordError("a batch holds at least one record")
    if count > RECORDS_PER_BATCH_MAX:
        raise InvalidRecordError(f"a batch holds at most {RECORDS_PER_BATCH_MAX} records")
    if offset_deltas is None:
        delta_column = np.arange(count, dtype=_I4)
    else:
        delta_column = np.asarray(offset_deltas, dtype=_I4)
        if len(delta_column) != count:
            raise InvalidRecordError("offset_deltas and values differ in length")
    last_delta = int(delta_column[-1]) if last_offset_delta is None else last_offset_delta
    if isinstance(timestamps, int):
        first_timestamp = max_timestamp = timestamps
        timestamp_column = np.zeros(count, dtype=_I8)
    else:
        absolute = np.asarray(timestamps, dtype=_I8)
        if len(absolute) != count:
            raise InvalidRecordError("timestamps and values differ in length")
        first_timestamp = int(absolute[0])
        max_timestamp = int(absolute.max())
        timestamp_column = absolute - first_timestamp
    value_lengths, values_blob = _lengths(values)
    if keys is None:
        key_lengths, keys_blob = np.full(count, -1, dtype=_I4), b""
    else:
        if len(keys) != count:
            raise InvalidRecordError("keys and values differ in length")
        key_lengths, keys_blob = _lengths(keys)
    if headers is None:
        header_lengths, headers_blob = np.zeros(count, dtype=_I4), b""
    else:
        if len(headers) != count:
            raise InvalidRecordError("headers and values differ in length")
        header_lengths, headers_blob = _encode_headers(headers)
    section = b"".join(
        (
            delta_column.tobytes(),
            timestamp_column.tobytes(),
            key_lengths.tobytes(),
            value_lengths.tobytes(),
            header_lengths.tobytes(),
            keys_blob,
            values_blob,
            headers_blob,
        )
    )
    if compression != CompressionType.NONE:
        section = UNCOMPRESSED_LENGTH.pack(len(section)) + compress(compression, section)
    attributes = (
        int(compression)
        | (TIMESTAMP_TYPE_BIT if timestamp_type == TimestampType.LOG_APPEND_TIME else 0)
        | (TRANSACTIONAL_BIT if transactional else 0)
        | (CONTROL_BIT if control else 0)
    )
    header = bytearray(
        HEADER.pack(
            base_offset,
            BATCH_OVERHEAD - LOG_OVERHEAD + len(section),
            partition_leader_epoch,
            MAGIC,
            0,
            attributes,
            last_delta,
            first_timestamp,
            max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            count,
        )
    )
    crc = crc32c.crc32c(section, batch_crc(header))
    CRC_FIELD.pack_into(header, CRC_POSITION, crc)
    return bytes(header) + section


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
    header = read_header(buffer, position)
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


def _records_section(buffer: Buffer, position: int, header: BatchHeader) -> bytes:
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
            result.append(_NO_HEADERS)
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
    section = _records_section(buffer, position, header)
    count = header.record_count
    columns_end = count * RECORD_COLUMNS_BYTES
    if len(section) < columns_end:
        raise CorruptRecordError(f"records section of {len(section)} bytes cannot hold {count} records")
    offset_deltas = np.frombuffer(section, dtype=_I4, count=count, offset=0)
    timestamp_deltas = np.frombuffer(section, dtype=_I8, count=count, offset=4 * count)
    key_lengths = np.frombuffer(section, dtype=_I4, count=count, offset=12 * count)
    value_lengths = np.frombuffer(section, dtype=_I4, count=count, offset=16 * count)
    header_lengths = np.frombuffer(section, dtype=_I4, count=count, offset=20 * count)
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
    if count > 1 and int(np.diff(offset_deltas).min()) <= 0:
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


def decode_batch(buffer: Buffer, position: int = 0, *, verify_crc: bool = True) -> RecordBatch:
    """Decode the batch at `position` into columns of Python objects."""
    header = validate_batch(buffer, position, verify_crc=verify_crc)
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
        record_headers = [_NO_HEADERS] * count
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
        timestamps = np.full(header.record_count, header.max_timestamp, dtype=_I8)
    else:
        timestamps = columns.timestamp_deltas + header.first_timestamp
    return BatchColumns(
        header,
        columns.offset_deltas.astype(_I8) + header.base_offset,
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


def iter_headers(buffer: Buffer) -> Iterator[tuple[int, BatchHeader]]:
    """(position, header) of each whole batch in a buffer of batches back to back (a fetch)."""
    position = 0
    while len(buffer) - position >= BATCH_OVERHEAD:
        header = read_header(buffer, position)
        if header.size < BATCH_OVERHEAD or position + header.size > len(buffer):
            raise CorruptRecordError(f"batch at position {position} overruns its buffer")
        yield position, header
        position += header.size
    if position != len(buffer):
        raise CorruptRecordError(f"{len(buffer) - position} stray bytes after the last batch")


def decode_batches(buffer: Buffer, *, verify_crc: bool = True) -> list[RecordBatch]:
    """Decode every batch in a buffer of batches back to back (CRC-checked unless checked before)."""
    return [decode_batch(buffer, position, verify_crc=verify_crc) for position, _ in iter_headers(buffer)]


def restamp(
    batch: bytearray | memoryview, *, base_offset: int, partition_leader_epoch: int, log_append_time: int | None = None
) -> None:
    """Set the fields the leader owns, in place, and re-checksum the batch."""
    BASE_OFFSET_FIELD.pack_into(batch, 0, base_offset)
    EPOCH_FIELD.pack_into(batch, PARTITION_LEADER_EPOCH_POSITION, partition_leader_epoch)
    if log_append_time is not None:
        header = read_header(batch)
        struct.pack_into("<h", batch, 21, header.attributes | TIMESTAMP_TYPE_BIT)
        struct.pack_into("<q", batch, 35, log_append_time)
    CRC_FIELD.pack_into(batch, CRC_POSITION, batch_crc(batch))
