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
from collections.abc import Iterator
from typing import Final, NamedTuple

import crc32c
import numpy as np

from tidelog.common.errors import CorruptRecordError
from tidelog.common.record.compression import CompressionType

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

INT32: Final = np.dtype("<i4")
INT64: Final = np.dtype("<i8")

Buffer = bytes | bytearray | memoryview
Header = tuple[str, bytes | None]
Headers = tuple[Header, ...]
NO_HEADERS: Final[Headers] = ()


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


def counted_size(header: BatchHeader) -> int:
    """The bytes of a batch that max.message.bytes bounds: all of it, but for the fixed columns of
    an uncompressed batch (24 bytes a record). Kafka's v2 format spends 7 or more bytes a record on
    varints there instead, so a batch a Kafka client sends within the limit is within it here,
    though our columns take more room; checked alike on append and on recovery."""
    if header.attributes & COMPRESSION_MASK:
        return header.size
    return header.size - RECORD_COLUMNS_BYTES * max(header.record_count, 0)


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
