"""The batches that hold given values, read straight from every replica's segment files after a
run: how a duplicate came to be (which producer epoch and sequence each copy carries, which leader
epoch wrote it) is in the batch headers, not in what a consumer returns.

Read-only and raw, not through `tidelog log dump` (cli/log_tools.py): that opens the log with the
storage engine, which recovers it and writes checkpoints, and the brokers still hold these logs."""

from __future__ import annotations

from pathlib import Path

from tidelog.common.record.batch_decoding import decode_batch
from tidelog.common.record.batch_layout import iter_headers

__all__ = ["batches_holding"]


def batches_holding(data_dir: Path, topic: str, partition: int, values: set[bytes], limit: int = 12) -> list[str]:
    """One line per batch (on any broker) holding one of `values`, at most `limit`."""
    lines: list[str] = []
    for folder in sorted(data_dir.glob(f"broker-*/{topic}-{partition}")):
        for segment in sorted(folder.glob("*.log")):
            data = segment.read_bytes()
            for position, header in iter_headers(data):
                batch = decode_batch(data, position, verify_crc=False)
                held = [record.value for record in batch.records() if record.value in values]
                if not held:
                    continue
                lines.append(
                    f"{folder.parent.name} {topic}-{partition}@{header.base_offset}..{header.last_offset}: "
                    f"leader epoch {header.partition_leader_epoch}, producer {header.producer_id} epoch "
                    f"{header.producer_epoch} sequence {header.base_sequence}, {header.record_count} records, "
                    f"{len(held)} of them duplicated (first {held[0]!r})"
                )
                if len(lines) >= limit:
                    return lines
    return lines
