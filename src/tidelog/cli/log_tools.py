"""`tidelog log ...`: offline tools over a partition log folder (like kafka-dump-log).

They open the folder with the storage engine itself, so what they print is what a broker would
serve: recovery runs first, and every batch shown passed its CRC check.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from tidelog.common.clock import wall_clock_ms
from tidelog.common.record.batch import RecordBatch, decode_batches, encode_batch

if TYPE_CHECKING:  # imported where a log is opened: every other command starts 0.13 s sooner
    from tidelog.broker.storage import PartitionLog

__all__ = ["add_log_commands", "iter_batches"]

READ_BYTES = 1 << 20


def iter_batches(partition_log: PartitionLog, start: int) -> Iterator[RecordBatch]:
    """Every batch from the one holding `start` to the log end, read as a consumer would."""
    offset = start
    while offset < partition_log.log_end_offset:
        batches = decode_batches(partition_log.read(offset, READ_BYTES))
        if not batches:
            return
        offset = batches[-1].header.next_offset
        yield from batches


def _open(folder: str) -> PartitionLog:
    from tidelog.broker.storage import LogConfig, PartitionLog  # noqa: PLC0415 - see TYPE_CHECKING above

    return PartitionLog.open(Path(folder), LogConfig.from_configs({}))


def _dump(args: argparse.Namespace) -> int:
    partition_log = _open(args.folder)
    try:
        print(
            f"log {partition_log.directory.name}: start {partition_log.log_start_offset}, "
            f"end {partition_log.log_end_offset}, high watermark {partition_log.high_watermark}"
        )
        print(f"{'segment':>22} {'next offset':>12} {'bytes':>12}")
        for segment in partition_log.segments():
            print(f"{segment.base_offset:>22} {segment.next_offset:>12} {segment.size:>12}")
        for batch in iter_batches(partition_log, max(args.offset, partition_log.log_start_offset)):
            header = batch.header
            print(
                f"batch base {header.base_offset} last {header.last_offset} records {header.record_count} "
                f"epoch {header.partition_leader_epoch} codec {header.compression.name} crc {header.crc:#010x}"
            )
            if args.records:
                for record in batch.records():
                    print(
                        f"  offset {record.offset} timestamp {record.timestamp} key {record.key!r} "
                        f"value {record.value!r}"
                    )
    finally:
        partition_log.close()
    return 0


def _produce(args: argparse.Namespace) -> int:
    partition_log = _open(args.folder)
    try:
        lines = [line.rstrip("\n").encode() for line in sys.stdin]
        if lines:
            info = partition_log.append_as_leader(encode_batch(lines, timestamps=wall_clock_ms()), leader_epoch=0)
            partition_log.update_high_watermark(partition_log.log_end_offset)
            print(f"appended {len(lines)} records at offsets {info.first_offset}..{info.last_offset}")
    finally:
        partition_log.close()
    return 0


def _consume(args: argparse.Namespace) -> int:
    partition_log = _open(args.folder)
    try:
        for batch in iter_batches(partition_log, max(args.offset, partition_log.log_start_offset)):
            for offset, value in zip(batch.offsets, batch.values, strict=True):
                if offset >= args.offset:
                    print(b"" if value is None else value.decode(errors="replace"))
    finally:
        partition_log.close()
    return 0


def add_log_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    log_parser = commands.add_parser("log", help="offline tools over a partition log folder")
    log_commands = log_parser.add_subparsers(dest="log_command", required=True, metavar="COMMAND")
    dump = log_commands.add_parser("dump", help="print segments and batches (recovering first)")
    dump.add_argument("folder", help="a <topic>-<partition> folder")
    dump.add_argument("--offset", type=int, default=0, help="start at the batch holding this offset")
    dump.add_argument("--records", action="store_true", help="print every record too")
    dump.set_defaults(handler=_dump)
    produce = log_commands.add_parser("produce", help="append stdin lines as one batch")
    produce.add_argument("folder", help="a <topic>-<partition> folder (made if missing)")
    produce.set_defaults(handler=_produce)
    consume = log_commands.add_parser("consume", help="print record values from an offset")
    consume.add_argument("folder", help="a <topic>-<partition> folder")
    consume.add_argument("--offset", type=int, default=0, help="the first offset to print")
    consume.set_defaults(handler=_consume)
