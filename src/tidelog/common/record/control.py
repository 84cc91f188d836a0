"""Control batches: the transaction markers (KIP-98) a transaction coordinator has written into
every partition a transaction touched, to say how it ended.

A control batch has the control and transactional attribute bits set, the producer id and epoch of
the transaction it ends, and exactly one record whose key and value are Kafka's bytes, big-endian
as Kafka lays them out (so the Kafka-protocol listener carries them over unchanged):

    key    int16 version (0) | int16 type (0 = ABORT, 1 = COMMIT)
    value  int16 version (0) | int32 coordinator_epoch

`coordinator_epoch` is the epoch of the transaction coordinator's ownership of the producer's
`__transaction_state` partition: a partition refuses markers from an older owner.
"""

from __future__ import annotations

import enum
import struct
from typing import Final, NamedTuple

from tidelog.common.errors import CorruptRecordError
from tidelog.common.record.batch_decoding import decode_batch
from tidelog.common.record.batch_encoding import encode_batch
from tidelog.common.record.batch_layout import Buffer, RecordBatch

__all__ = ["ControlType", "Marker", "decode_marker", "encode_marker", "marker_of"]

_KEY: Final = struct.Struct(">hh")
_VALUE: Final = struct.Struct(">hi")
CONTROL_KEY_VERSION: Final = 0
MARKER_VALUE_VERSION: Final = 0


class ControlType(enum.IntEnum):
    ABORT = 0
    COMMIT = 1


class Marker(NamedTuple):
    """What a transaction marker says: how the producer's transaction ended, and by whose word."""

    control_type: ControlType
    coordinator_epoch: int

    @property
    def commit(self) -> bool:
        return self.control_type == ControlType.COMMIT


def encode_marker(
    producer_id: int, producer_epoch: int, marker: Marker, *, timestamp: int, base_offset: int = 0
) -> bytes:
    """The control batch holding one marker (the leader stamps offset and epoch on append)."""
    assert producer_id >= 0, "a marker ends some producer's transaction"
    return encode_batch(
        [_VALUE.pack(MARKER_VALUE_VERSION, marker.coordinator_epoch)],
        keys=[_KEY.pack(CONTROL_KEY_VERSION, marker.control_type)],
        timestamps=timestamp,
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        transactional=True,
        control=True,
    )


def decode_marker(buffer: Buffer, position: int = 0, *, verify_crc: bool = False) -> Marker:
    """The marker in the control batch at `position`; CorruptRecordError if it is not one."""
    return marker_of(decode_batch(buffer, position, verify_crc=verify_crc))


def marker_of(batch: RecordBatch) -> Marker:
    """The marker a decoded control batch holds; CorruptRecordError if it is not one."""
    header = batch.header
    if not header.is_control or len(batch) != 1:
        raise CorruptRecordError(f"batch at offset {header.base_offset} is not a one-record control batch")
    key, value = batch.keys[0], batch.values[0]
    if key is None or len(key) != _KEY.size or value is None or len(value) < _VALUE.size:
        raise CorruptRecordError(f"control record at offset {header.base_offset} is malformed")
    version, control_type = _KEY.unpack(key)
    if version != CONTROL_KEY_VERSION or control_type not in (ControlType.ABORT, ControlType.COMMIT):
        raise CorruptRecordError(f"control record at offset {header.base_offset}: unknown type {control_type}")
    _, coordinator_epoch = _VALUE.unpack_from(value)
    return Marker(ControlType(control_type), coordinator_epoch)
