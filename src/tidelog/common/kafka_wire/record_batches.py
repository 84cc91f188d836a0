"""Kafka's v2 record batches (magic 2, the format every client since Kafka 0.11 writes) to and from
Tidelog's stored batches (ADR 0002: the same header fields, little-endian, columnar records).

The per-record varint work is done by aiokafka's Cython record module (a maintained C-backed
Kafka v2 codec: about 0.1-0.8 µs a record read, 0.2 µs written); what is ours is bulk work over
columns. Everything that identifies a batch to the log carries over: producer id, epoch and base
sequence (so idempotence and transactions hold), the transactional and control bits, offset
deltas and the last offset delta (a compacted batch keeps its span), timestamps and their type,
headers, and the codec (a gzip batch is stored gzip-compressed and sent back gzip-compressed).

Kafka's CRC (CRC-32C from the attributes to the end) is checked on the way in; a batch on the way
out gets Kafka's CRC. Pure functions over bytes: safe from any thread.
"""

from __future__ import annotations

import struct
import types
from typing import Final

import crc32c
from aiokafka.codec import (
    gzip_decode,
    gzip_encode,
    lz4_decode,
    lz4_encode,
    snappy_decode,
    snappy_encode,
    zstd_decode,
    zstd_encode,
)
from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder  # the C one, when built

from tidelog.common.errors import CorruptRecordError, InvalidRecordError, UnsupportedCompressionTypeError
from tidelog.common.record import batch_layout
from tidelog.common.record.batch_decoding import decode_batch, records_section
from tidelog.common.record.batch_encoding import assemble_batch, encode_batch
from tidelog.common.record.batch_layout import (
    CONTROL_BIT,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    Buffer,
    Headers,
    TimestampType,
    iter_headers,
)
from tidelog.common.record.compression import CompressionType

_v2records: types.ModuleType | None
try:  # the compiled transcoder (setup.py builds it where a C compiler is): else aiokafka's reader
    from tidelog.common.kafka_wire import _v2records
except ImportError:  # pragma: no cover - an install without a compiler
    _v2records = None

__all__ = ["from_kafka_batches", "to_kafka_batches"]

KAFKA_MAGIC: Final = 2
KAFKA_HEADER: Final = struct.Struct(">qiibIhiqqqhii")  # Kafka's v2 batch header, big-endian
KAFKA_OVERHEAD: Final = KAFKA_HEADER.size  # 61, as the stored header
MAGIC_POSITION: Final = 16
ATTRIBUTES: Final = struct.Struct(">h")
ATTRIBUTES_POSITION: Final = 21
LAST_OFFSET_DELTA: Final = struct.Struct(">i")
LAST_OFFSET_DELTA_POSITION: Final = 23
CRC: Final = struct.Struct(">I")
CRC_POSITION: Final = 17
CRC_START: Final = 21
OFFSET_AND_EPOCH: Final = struct.Struct(">qiib")  # base offset, batch length, leader epoch, magic
BATCH_SIZE_UNBOUNDED: Final = 1 << 31  # the builder's own limit; the broker's limits come first
KAFKA_DEFLATE: Final = {  # as aiokafka's batch builder compresses (lz4 level 9, zstd 3, xerial snappy)
    CompressionType.GZIP: gzip_encode,
    CompressionType.SNAPPY: snappy_encode,
    CompressionType.LZ4: lz4_encode,
    CompressionType.ZSTD: zstd_encode,
}
KAFKA_INFLATE: Final = {
    CompressionType.GZIP: gzip_decode,
    CompressionType.SNAPPY: snappy_decode,
    CompressionType.LZ4: lz4_decode,
    CompressionType.ZSTD: zstd_decode,
}


def kafka_batch_spans(data: Buffer) -> list[tuple[int, int]]:
    """(start, size) of each Kafka batch in a produce request's records, whole and magic 2."""
    view = memoryview(data)
    spans: list[tuple[int, int]] = []
    position = 0
    while position < len(view):
        if len(view) - position < KAFKA_OVERHEAD:
            raise CorruptRecordError(f"{len(view) - position} bytes at position {position} are no whole batch")
        _, length, _, magic = OFFSET_AND_EPOCH.unpack_from(view, position)
        size = 12 + length
        if size < KAFKA_OVERHEAD or position + size > len(view):
            raise CorruptRecordError(f"the batch at position {position} claims {size} bytes")
        if magic != KAFKA_MAGIC:
            raise InvalidRecordError(f"message format v{magic}: only v2 record batches (magic 2) are accepted")
        spans.append((position, size))
        position += size
    return spans


def from_kafka_batches(data: Buffer, *, compiled: bool = True) -> bytes:
    """A produce request's Kafka v2 batches as stored batches, back to back (CRC checked).

    Batches of create-time timestamps (what producers send) go through the compiled transcoder
    when it is installed, inflated first by aiokafka's codecs if compressed; log-append-time ones,
    and every batch with `compiled=False` (the tests' reference), through aiokafka's reader. Both
    give the same bytes, or both refuse."""
    view = memoryview(data)
    stored: list[bytes] = []
    for start, size in kafka_batch_spans(view):
        header = KAFKA_HEADER.unpack_from(view, start)
        if crc32c.crc32c(view[start + CRC_START : start + size]) != header[4]:
            raise CorruptRecordError(f"the batch at position {start} fails its CRC")
        attributes = header[5]
        try:
            codec = CompressionType(attributes & batch_layout.COMPRESSION_MASK)
        except ValueError:
            raise UnsupportedCompressionTypeError(f"compression codec {attributes & 7}") from None
        if compiled and _v2records is not None and not attributes & TIMESTAMP_TYPE_BIT:
            records: Buffer = view[start + KAFKA_OVERHEAD : start + size]
            if codec != CompressionType.NONE:
                records = _inflated(records, codec, start)
            stored.append(_transcoded(records, header, start, codec))
        else:
            stored.append(_read_with_aiokafka(bytes(view[start : start + size]), codec, start))
    return b"".join(stored)


def _inflated(records: Buffer, codec: CompressionType, start: int) -> bytes:
    """A compressed batch's records, inflated by aiokafka's codecs (Kafka's framings: gzip, snappy
    raw or xerial-framed, lz4 frames, zstd), as its reader inflates them."""
    try:
        return bytes(KAFKA_INFLATE[codec](bytes(records)))
    except Exception as error:  # each codec raises its own
        raise CorruptRecordError(f"the batch at position {start} does not inflate ({codec.name}): {error}") from None


def _transcoded(records: Buffer, header: tuple[int, ...], start: int, codec: CompressionType) -> bytes:
    """One batch's uncompressed records through the compiled transcoder (_v2records.c), stored
    compressed with the codec it came with."""
    assert _v2records is not None
    attributes, last_offset_delta, first_timestamp = header[5], header[6], header[7]
    count = header[12]
    if not 0 < count <= batch_layout.RECORDS_PER_BATCH_MAX:
        raise InvalidRecordError(f"a batch holds 1 to {batch_layout.RECORDS_PER_BATCH_MAX} records, not {count}")
    try:
        section, first, largest = _v2records.records_to_section(records, count, first_timestamp)
    except ValueError as error:
        raise CorruptRecordError(f"the batch at position {start} does not decode: {error}") from None
    return assemble_batch(
        section,
        count=count,
        last_offset_delta=last_offset_delta,
        first_timestamp=first,
        max_timestamp=largest,
        base_offset=0,
        partition_leader_epoch=-1,
        compression=codec,
        timestamp_type=TimestampType.CREATE_TIME,
        producer_id=header[9],
        producer_epoch=header[10],
        base_sequence=header[11],
        transactional=bool(attributes & TRANSACTIONAL_BIT),
        control=bool(attributes & CONTROL_BIT),
    )


def _read_with_aiokafka(chunk: bytes, codec: CompressionType, start: int) -> bytes:
    """One batch through aiokafka's Cython reader and our column encoder."""
    batch = DefaultRecordBatch(chunk)
    try:  # one pass over the records, then a column each (zip)
        rows = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in batch]
    except Exception as error:  # aiokafka raises its own CorruptRecordException, or a codec's
        raise CorruptRecordError(f"the batch at position {start} does not decode: {error}") from None
    if not rows:
        raise InvalidRecordError("a batch holds at least one record")
    offsets, timestamps, keys, values, headers = zip(*rows, strict=True)
    base = batch.base_offset
    # A producer's batch: offsets base..base+n-1 (then the encoder's default deltas), often one
    # timestamp, often no keys, usually no headers — each recognised by one C-level pass.
    contiguous = offsets == tuple(range(base, base + len(rows)))
    try:
        return encode_batch(
            values,
            keys=None if keys.count(None) == len(keys) else keys,  # (no key at all: the null column)
            timestamps=timestamps[0] if min(timestamps) == max(timestamps) else timestamps,
            headers=[_stored_headers(record_headers) for record_headers in headers] if any(headers) else None,
            offset_deltas=None if contiguous else [offset - base for offset in offsets],
            last_offset_delta=batch.last_offset_delta,
            compression=codec,
            timestamp_type=batch.timestamp_type,
            producer_id=batch.producer_id,
            producer_epoch=batch.producer_epoch,
            base_sequence=batch.base_sequence,
            transactional=batch.is_transactional,
            control=batch.is_control_batch,
        )
    except (OverflowError, struct.error) as error:  # a timestamp past 64 bits, a header name past 64 KiB
        raise CorruptRecordError(f"the batch at position {start} does not fit the stored layout: {error}") from None


def _stored_headers(headers: list[tuple[str, bytes | None]]) -> Headers:
    return tuple(headers) if headers else batch_layout.NO_HEADERS


def _whole_batches_end(data: Buffer) -> int:
    """Where the last whole batch ends: a read cut by a byte limit may end inside one, and Kafka's
    clients skip such a partial batch just as they would skip Kafka's own."""
    position = 0
    while len(data) - position >= batch_layout.LOG_OVERHEAD:
        size = batch_layout.LOG_OVERHEAD + batch_layout.EPOCH_FIELD.unpack_from(data, position + 8)[0]
        if size < batch_layout.BATCH_OVERHEAD or position + size > len(data):
            break
        position += size
    return position


def to_kafka_batches(data: Buffer, *, compiled: bool = True) -> bytes:
    """Stored batches (a fetch's bytes) as Kafka v2 batches, each under its own offset, leader
    epoch and producer fields, with Kafka's CRC: through the compiled transcoder where installed,
    else, and with `compiled=False` (the tests' reference), through aiokafka's batch builder. Both
    give batches a Kafka reader reads the same."""
    out: list[bytes] = []
    for position, header in iter_headers(memoryview(data)[: _whole_batches_end(data)]):
        if compiled and _v2records is not None:
            out.append(_built(data, position, header))
            continue
        batch = decode_batch(data, position, verify_crc=False)  # checked where it was stored and read
        builder = DefaultRecordBatchBuilder(
            KAFKA_MAGIC,
            header.attributes & batch_layout.COMPRESSION_MASK,
            1 if header.is_transactional else 0,
            header.producer_id,
            header.producer_epoch,
            header.base_sequence,
            BATCH_SIZE_UNBOUNDED,
        )
        base = header.base_offset
        append = builder.append
        for offset, timestamp, key, value, headers in zip(
            batch.offsets, batch.timestamps, batch.keys, batch.values, batch.headers, strict=True
        ):
            append(offset - base, timestamp, key, value, list(headers))
        built = builder.build()
        # The builder knows neither control batches, log-append time nor a compacted batch's span.
        attributes = ATTRIBUTES.unpack_from(built, ATTRIBUTES_POSITION)[0]
        if header.is_control:
            attributes |= CONTROL_BIT
        if header.timestamp_type == TimestampType.LOG_APPEND_TIME:
            attributes |= TIMESTAMP_TYPE_BIT
            struct.pack_into(">q", built, 35, header.max_timestamp)
        ATTRIBUTES.pack_into(built, ATTRIBUTES_POSITION, attributes)
        LAST_OFFSET_DELTA.pack_into(built, LAST_OFFSET_DELTA_POSITION, header.last_offset_delta)
        CRC.pack_into(built, CRC_POSITION, crc32c.crc32c(memoryview(built)[CRC_START:]))
        struct.pack_into(">q", built, 0, base)
        struct.pack_into(">i", built, 12, header.partition_leader_epoch)
        out.append(bytes(built))
    return b"".join(out)


def _built(data: Buffer, position: int, header: batch_layout.BatchHeader) -> bytes:
    """One stored batch as a Kafka v2 batch through the compiled transcoder (_v2records.c), then
    compressed with its codec by aiokafka's codecs, and sent uncompressed where that is no smaller
    (as aiokafka's builder does)."""
    assert _v2records is not None
    try:
        records = _v2records.section_to_records(records_section(data, position, header), header.record_count)
    except ValueError as error:  # (checked where it was stored: a broken disk or a bug)
        raise CorruptRecordError(f"stored batch at offset {header.base_offset}: {error}") from None
    codec = header.attributes & batch_layout.COMPRESSION_MASK
    if codec:
        compressed = KAFKA_DEFLATE[CompressionType(codec)](records)
        if len(compressed) < len(records):
            records = compressed
        else:
            codec = 0
    # Log-append time: the bit and the batch's max timestamp say it (Kafka's readers take every
    # record's timestamp from there); the first timestamp and deltas are kept, as Kafka's broker keeps them.
    attributes = codec | (header.attributes & (TRANSACTIONAL_BIT | CONTROL_BIT | TIMESTAMP_TYPE_BIT))
    batch = bytearray(
        KAFKA_HEADER.pack(
            header.base_offset,
            KAFKA_OVERHEAD - 12 + len(records),
            header.partition_leader_epoch,
            KAFKA_MAGIC,
            0,
            attributes,
            header.last_offset_delta,
            header.first_timestamp,
            header.max_timestamp,
            header.producer_id,
            header.producer_epoch,
            header.base_sequence,
            header.record_count,
        )
    )
    batch += records
    CRC.pack_into(batch, CRC_POSITION, crc32c.crc32c(memoryview(batch)[CRC_START:]))
    return bytes(batch)
