"""Storage engine benchmark: prints each figure beside its physical reference, measured in the same run.

    .venv/bin/python bench/bench_storage.py [--megabytes 512] [--rounds 3] [--dir /path/on/the/disk]

- append: raw sequential write of the same bytes with one fsync at the end (the reference) vs
  PartitionLog.append_as_leader with 1 MiB batches then one flush; the ratio is the figure.
- codec: records/s to encode and to decode batches of 100-byte values, no compression (decode
  hands back every record's offset, timestamp, key and value as Python objects), plus the
  compressed codecs for information.
- Kafka v2 transcoding (the Kafka listener, issue 35): records/s from a Kafka v2 batch (as
  librdkafka sends it) to the stored layout, and from a stored batch to Kafka v2 (a fetch), beside
  the native encode and decode of the same records above; uncompressed, also through aiokafka's
  reader and builder, the paths of an install without the compiled transcoder (ADR 0029).
- read: raw pread of the log file vs PartitionLog.read in 1 MiB fetches (page cache warm), with
  the CRC check of every batch served.
- open (a broker's restart, issue 37): `--logs` partition logs of one small batch each opened as a
  restarted broker opens them (open_partition_log, the folder found by the data directory's
  listing), left by a kill -9 (recovered) and closed cleanly; the reference is the file-system
  floor of the same opens, the system calls no open can skip (list the folder, read its
  partition.metadata, open and stat its segment).

Each measurement runs `--rounds` times, raw and log alternating, and the median is printed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from aiokafka.record.default_records import DefaultRecordBatchBuilder

from tidelog.broker.log_folders import PARTITION_METADATA_FILE, log_folder, open_partition_log
from tidelog.broker.storage import LogConfig, PartitionLog
from tidelog.broker.storage.checkpoint import read_small_file
from tidelog.broker.storage.log_files import CLEAN_SHUTDOWN_FILE
from tidelog.broker.storage.segment import LOG_SUFFIX, segment_file_name
from tidelog.common.kafka_wire.record_batches import from_kafka_batches, to_kafka_batches
from tidelog.common.record.batch import decode_batch, encode_batch, iter_headers
from tidelog.common.record.compression import CompressionType

MIB = 1 << 20
VALUE_BYTES = 100
CODEC_BATCH_RECORDS = 1000
CODEC_BATCHES = 300


def _median_seconds(run: Callable[[], None], rounds: int) -> float:
    timings = []
    for _ in range(rounds):
        start = time.perf_counter()
        run()
        timings.append(time.perf_counter() - start)
    return statistics.median(timings)


def _one_mib_batch() -> bytes:
    per_record = VALUE_BYTES + 24  # value + fixed columns
    count = (MIB - 61) // per_record
    values = [os.urandom(VALUE_BYTES) for _ in range(count)]
    return encode_batch(values, timestamps=time.time_ns() // 1_000_000)


def bench_append(workdir: Path, total_bytes: int, rounds: int) -> tuple[float, float, Path]:
    batch = _one_mib_batch()
    batches = total_bytes // len(batch)
    raw_path = workdir / "raw.bin"
    log_dir = workdir / "bench-0"

    def settle() -> None:
        """Untimed: remove the previous round's files and let writeback finish."""
        raw_path.unlink(missing_ok=True)
        shutil.rmtree(log_dir, ignore_errors=True)
        os.sync()

    def raw_write() -> None:
        descriptor = os.open(raw_path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            for _ in range(batches):
                os.write(descriptor, batch)
            os.fsync(descriptor)
        finally:
            os.close(descriptor)

    def log_append() -> None:
        partition_log = PartitionLog.open(log_dir, LogConfig.from_configs({"max.message.bytes": 2 * MIB}))
        for _ in range(batches):
            partition_log.append_as_leader(batch, leader_epoch=0)
        partition_log.flush()
        partition_log.close()

    raw_times, log_times = [], []
    for _ in range(rounds):  # alternate so both see the same machine noise
        settle()
        raw_times.append(_median_seconds(raw_write, 1))
        settle()
        log_times.append(_median_seconds(log_append, 1))
    written = batches * len(batch)
    raw_path.unlink(missing_ok=True)
    return written / statistics.median(raw_times) / MIB, written / statistics.median(log_times) / MIB, log_dir


def bench_codec(rounds: int, compression: CompressionType) -> tuple[float, float]:
    values = [os.urandom(VALUE_BYTES) for _ in range(CODEC_BATCH_RECORDS)]
    now = time.time_ns() // 1_000_000
    timestamps = list(range(now, now + CODEC_BATCH_RECORDS))
    encoded = encode_batch(values, timestamps=timestamps, compression=compression)
    checked = decode_batch(encoded)
    assert checked.values == values and checked.timestamps == timestamps

    def encode() -> None:
        for _ in range(CODEC_BATCHES):
            encode_batch(values, timestamps=timestamps, compression=compression)

    def decode() -> None:
        for _ in range(CODEC_BATCHES):
            batch = decode_batch(encoded)
            assert len(batch.values) == CODEC_BATCH_RECORDS

    records = CODEC_BATCHES * CODEC_BATCH_RECORDS
    return records / _median_seconds(encode, rounds), records / _median_seconds(decode, rounds)


def bench_kafka_transcoding(rounds: int, compression: CompressionType, *, compiled: bool = True) -> tuple[float, float]:
    """Records/s: Kafka v2 → stored (a produce on the Kafka listener), stored → Kafka v2 (a fetch);
    `compiled=False` goes through aiokafka's reader and builder, the paths the compiled transcoder
    replaced (ADR 0029)."""
    values = [os.urandom(VALUE_BYTES) for _ in range(CODEC_BATCH_RECORDS)]
    now = time.time_ns() // 1_000_000
    builder = DefaultRecordBatchBuilder(2, int(compression), 0, 7, 0, 0, 1 << 30)
    for delta, value in enumerate(values):
        builder.append(delta, now + delta, None, value, [])
    kafka_batch = bytes(builder.build())
    stored = from_kafka_batches(kafka_batch)
    assert decode_batch(stored).values == values

    def produce_side() -> None:
        for _ in range(CODEC_BATCHES):
            from_kafka_batches(kafka_batch, compiled=compiled)

    def fetch_side() -> None:
        for _ in range(CODEC_BATCHES):
            to_kafka_batches(stored, compiled=compiled)

    records = CODEC_BATCHES * CODEC_BATCH_RECORDS
    return records / _median_seconds(produce_side, rounds), records / _median_seconds(fetch_side, rounds)


def bench_read(log_dir: Path, rounds: int) -> tuple[float, float]:
    partition_log = PartitionLog.open(log_dir, LogConfig.from_configs({"max.message.bytes": 2 * MIB}))
    segment_files = sorted(log_dir.glob("*.log"))
    total = sum(path.stat().st_size for path in segment_files)

    def raw_read() -> None:
        for path in segment_files:
            descriptor = os.open(path, os.O_RDONLY)
            try:
                position = 0
                while chunk := os.pread(descriptor, MIB, position):
                    position += len(chunk)
            finally:
                os.close(descriptor)

    def log_read() -> None:
        offset = partition_log.log_start_offset
        fetched = 0
        while offset < partition_log.log_end_offset:
            data = partition_log.read(offset, MIB)
            fetched += len(data)
            offset = _next_offset_after(data)
        assert fetched == total

    raw_times, log_times = [], []
    for _ in range(rounds):
        raw_times.append(_median_seconds(raw_read, 1))
        log_times.append(_median_seconds(log_read, 1))
    partition_log.close()
    return total / statistics.median(raw_times) / MIB, total / statistics.median(log_times) / MIB


def bench_open(workdir: Path, logs: int, rounds: int) -> tuple[float, float, float]:
    """Seconds to open `logs` logs: the file-system floor, left by a kill -9, closed cleanly."""
    data_dir = workdir / "open"
    config = LogConfig.from_configs({})
    topic_id = "0123456789abcdef0123456789abcdef"
    batch = encode_batch([b"v" * VALUE_BYTES] * 20, timestamps=1000)
    for partition in range(logs):
        partition_log = open_partition_log(data_dir, "bench", partition, topic_id, config)
        partition_log.append_as_leader(batch, leader_epoch=0)
        partition_log.close()
    folders = [log_folder(data_dir, "bench", partition) for partition in range(logs)]

    def floor() -> None:
        for folder in folders:
            os.listdir(folder)
            read_small_file(folder / PARTITION_METADATA_FILE)
            descriptor = os.open(folder / segment_file_name(0, LOG_SUFFIX), os.O_RDWR | os.O_APPEND)
            os.fstat(descriptor)
            os.close(descriptor)

    def open_all(clean: bool) -> float:
        if not clean:  # what a kill -9 leaves: no clean-shutdown marker, every log recovered
            for folder in folders:
                (folder / CLEAN_SHUTDOWN_FILE).unlink(missing_ok=True)
        started = time.perf_counter()
        opened = [
            open_partition_log(data_dir, "bench", partition, topic_id, config, clean=clean, found=True)
            for partition in range(logs)
        ]
        elapsed = time.perf_counter() - started
        for partition_log in opened:
            partition_log.close()  # (marks each folder clean again: not timed)
        return elapsed

    def median_open(clean: bool) -> float:
        return statistics.median(open_all(clean) for _ in range(rounds))

    return _median_seconds(floor, rounds), median_open(False), median_open(True)


def _next_offset_after(data: bytes | bytearray) -> int:
    """The offset after the last batch in `data` (walking headers only, as a consumer would)."""
    *_, (_, last) = iter_headers(data)
    return last.next_offset


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--megabytes", type=int, default=512, help="bytes to write per append round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", default=None, help="folder on the disk to measure (default: a temp folder)")
    parser.add_argument("--logs", type=int, default=2000, help="partition logs to open (a restart: 10,000)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as temporary:
        workdir = Path(temporary)
        raw_mib_s, log_mib_s, log_dir = bench_append(workdir, args.megabytes * MIB, args.rounds)
        print(f"append, 1 MiB batches, {args.megabytes} MiB, median of {args.rounds}:")
        print(f"  raw sequential write + 1 fsync   {raw_mib_s:10.1f} MiB/s   (reference)")
        print(
            f"  PartitionLog.append_as_leader     {log_mib_s:10.1f} MiB/s   "
            f"ratio {log_mib_s / raw_mib_s:6.1%}   (target >= 60%)"
        )
        raw_read_mib_s, log_read_mib_s = bench_read(log_dir, args.rounds)
        print("read, 1 MiB fetches, page cache warm, every batch CRC-checked:")
        print(f"  raw pread of the segment files     {raw_read_mib_s:10.1f} MiB/s   (reference)")
        print(
            f"  PartitionLog.read                  {log_read_mib_s:10.1f} MiB/s   "
            f"ratio {log_read_mib_s / raw_read_mib_s:6.1%}"
        )
        floor_s, unclean_s, clean_s = bench_open(workdir, args.logs, args.rounds)
        print(f"open {args.logs:,} logs of one small batch each, as a restarted broker does, median of {args.rounds}:")
        floor_name = "file-system floor (list, read the marker, open the segment)"
        print(f"  {floor_name:<59}{floor_s / args.logs * 1e6:8.1f} us/log   (reference)")
        for name, seconds in (("left by a kill -9 (recovered)", unclean_s), ("closed cleanly", clean_s)):
            print(f"  {name:<59}{seconds / args.logs * 1e6:8.1f} us/log   {seconds / floor_s:5.1f}x the floor")
    print(f"codec, batches of {CODEC_BATCH_RECORDS} records with {VALUE_BYTES}-byte values:")
    for codec in CompressionType:
        encode_rate, decode_rate = bench_codec(args.rounds, codec)
        target = "   (target >= 2,000,000 each)" if codec == CompressionType.NONE else ""
        print(
            f"  {codec.name:<6} encode {encode_rate:12,.0f} records/s   decode {decode_rate:12,.0f} records/s{target}"
        )
    print("Kafka v2 transcoding (the Kafka listener), the same batches:")
    for codec in (CompressionType.NONE, CompressionType.LZ4, CompressionType.ZSTD):
        produce_rate, fetch_rate = bench_kafka_transcoding(args.rounds, codec)
        print(
            f"  {codec.name:<6} v2 -> stored {produce_rate:12,.0f} records/s   "
            f"stored -> v2 {fetch_rate:12,.0f} records/s"
        )
    produce_rate, fetch_rate = bench_kafka_transcoding(args.rounds, CompressionType.NONE, compiled=False)
    print(
        f"  NONE   through aiokafka (no compiled transcoder): v2 -> stored {produce_rate:12,.0f} records/s   "
        f"stored -> v2 {fetch_rate:12,.0f} records/s"
    )


if __name__ == "__main__":
    main()
