"""Record batches: the byte format (batch.py) and its compression codecs (compression.py)."""

from tidelog.common.record.batch import (
    BatchHeader,
    Record,
    RecordBatch,
    TimestampType,
    decode_batch,
    encode_batch,
    read_header,
    validate_batch,
)
from tidelog.common.record.compression import CompressionType

__all__ = [
    "BatchHeader",
    "CompressionType",
    "Record",
    "RecordBatch",
    "TimestampType",
    "decode_batch",
    "encode_batch",
    "read_header",
    "validate_batch",
]
