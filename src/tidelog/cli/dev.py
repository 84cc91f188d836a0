"""`tidelog dev up`: run what exists of the platform on this machine, on real files.

Today Tidelog is its storage engine: `dev up` writes a demo topic partition under the data folder
through the partition log, rolls segments, reads everything back with CRC checks, and prints the
layout. Run it twice: the second run recovers the same data and appends after it.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from tidelog.broker.storage import LogConfig, PartitionLog
from tidelog.cli.log_tools import iter_batches
from tidelog.common.clock import wall_clock_ms
from tidelog.common.record.batch import encode_batch

__all__ = ["add_dev_commands"]

DEMO_BATCHES = 200
DEMO_BATCH_RECORDS = 500


def _up(args: argparse.Namespace) -> int:
    folder = Path(args.data_dir) / "demo-0"
    config = LogConfig.from_configs({"segment.bytes": str(4 << 20)})
    partition_log = PartitionLog.open(folder, config)
    try:
        start = partition_log.log_end_offset
        print(f"opened {folder} (recovered): offsets {partition_log.log_start_offset}..{start}")
        for batch_number in range(DEMO_BATCHES):
            values = [b"record %d of batch %d" % (index, batch_number) for index in range(DEMO_BATCH_RECORDS)]
            partition_log.append_as_leader(encode_batch(values, timestamps=wall_clock_ms()), leader_epoch=0)
        partition_log.update_high_watermark(partition_log.log_end_offset)
        partition_log.flush()
        records = sum(len(batch) for batch in iter_batches(partition_log, start))
        print(f"appended and read back {records} records; log end offset {partition_log.log_end_offset}")
        print(f"{'segment base offset':>20} {'next offset':>12} {'bytes':>10}")
        for segment in partition_log.segments():
            print(f"{segment.base_offset:>20} {segment.next_offset:>12} {segment.size:>10}")
        print("inspect it with: tidelog log dump", folder)
    finally:
        partition_log.close()
    return 0


def add_dev_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    dev = commands.add_parser("dev", help="run Tidelog locally")
    dev_commands = dev.add_subparsers(dest="dev_command", required=True)
    up = dev_commands.add_parser("up", help="run the local platform (today: the storage engine)")
    up.add_argument("--data-dir", default="data", help="folder for all local data (default: ./data)")
    up.set_defaults(handler=_up)
