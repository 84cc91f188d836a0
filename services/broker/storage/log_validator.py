"""What an append is checked and stamped with before it reaches a segment (Kafka's LogValidator):
every batch validated before any is written (a bad request never half-writes), producer batches
checked record by record (and refused when they are control batches, which only the broker
writes), and, as leader, offsets assigned from the log end with the leader epoch (and
LogAppendTime) stamped in place."""

from __future__ import annotations

import dataclasses

from tidelog.broker.storage.log_config import LogConfig
from tidelog.common.errors import InvalidRecordError, RecordTooLargeError
from tidelog.common.record.batch import (
    BATCH_OVERHEAD,
    BatchHeader,
    check_records,
    counted_size,
    read_header,
    restamp,
    validate_batch,
)

__all__ = ["AppendInfo", "assign_offsets", "validate_batches"]


@dataclasses.dataclass(frozen=True, slots=True)
class AppendInfo:
    first_offset: int
    last_offset: int
    max_timestamp: int
    log_append_time_ms: int  # -1 unless the topic uses LogAppendTime
    batch_count: int
    bytes: int
    duplicate: bool = False  # an idempotent producer's retry: nothing appended, original offsets


def validate_batches(
    records: bytes | bytearray | memoryview, config: LogConfig, *, from_producer: bool
) -> list[BatchHeader]:
    """Check every batch before writing any: sizes against max.message.bytes, CRCs and layout,
    and a producer's records (contiguous offsets; keys on a compacted topic)."""
    headers: list[BatchHeader] = []
    position = 0
    limit = config.max_message_bytes
    if not records:
        raise InvalidRecordError("no record batches to append")
    while position < len(records):
        if len(records) - position >= BATCH_OVERHEAD:
            # Say "too large" before "torn": a client cut off at a size limit should learn why.
            size = counted_size(read_header(records, position))
            if size > limit:
                raise RecordTooLargeError(f"batch of {size} bytes exceeds max.message.bytes={limit}")
        header = validate_batch(records, position)
        if header.is_control and from_producer:
            raise InvalidRecordError("control batches (transaction markers) come only from a transaction coordinator")
        if (header.is_transactional or header.is_control) and header.producer_id < 0:
            raise InvalidRecordError("a transactional batch needs a producer id")
        if from_producer or config.compact:
            check_records(records, position, header, contiguous_offsets=from_producer, require_keys=config.compact)
        headers.append(header)
        position += header.size
    return headers


def assign_offsets(
    data: bytearray, headers: list[BatchHeader], next_offset: int, leader_epoch: int, append_time: int | None
) -> list[BatchHeader]:
    """As leader: stamp each batch in `data` with its base offset (from `next_offset` on), the
    leader epoch and, with LogAppendTime, the append time; the headers as stamped."""
    position = 0
    stamped: list[BatchHeader] = []
    for header in headers:
        view = memoryview(data)[position : position + header.size]
        restamp(view, base_offset=next_offset, partition_leader_epoch=leader_epoch, log_append_time=append_time)
        stamped.append(
            header._replace(
                base_offset=next_offset,
                partition_leader_epoch=leader_epoch,
                max_timestamp=header.max_timestamp if append_time is None else append_time,
            )
        )
        next_offset += header.last_offset_delta + 1
        position += header.size
    return stamped
