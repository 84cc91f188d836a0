"""Batch job: a topic (or a range of it) → Parquet files, one row per record with the Kafka
source's columns (key and value as the bytes they are), partitioned by topic partition.

    python -m tidelog.spark_jobs.export_parquet --bootstrap localhost:9292 --topic payments \\
        --path /tmp/payments.parquet [--starting-offsets earliest] [--ending-offsets latest]
"""

from __future__ import annotations

import argparse
from typing import Any

from tidelog.spark_jobs.session import bootstrap_of, session


def export(spark: Any, *, bootstrap: str, topic: str, path: str, starting: str, ending: str) -> int:
    """Write the records to `path` (replacing what was there); how many."""
    frame = (
        spark.read.format("tidelog")
        .option("tidelog.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", starting)
        .option("endingOffsets", ending)
        .option("includeHeaders", "true")
        .load()
        .cache()
    )
    frame.write.mode("overwrite").partitionBy("partition").parquet(path)
    count: int = frame.count()
    frame.unpersist()
    return count


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--bootstrap",
        help="broker endpoints host:port,... (default: the local `tidelog dev up` cluster, else localhost:9292)",
    )
    parser.add_argument("--topic", required=True)
    parser.add_argument("--path", required=True, help="folder the Parquet files go to (replaced)")
    parser.add_argument("--starting-offsets", default="earliest", help="earliest or the source's JSON")
    parser.add_argument("--ending-offsets", default="latest", help="latest or the source's JSON")
    args = parser.parse_args(argv)
    args.bootstrap = bootstrap_of(args.bootstrap)
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    spark = session("tidelog-export-parquet")
    try:
        count = export(
            spark,
            bootstrap=args.bootstrap,
            topic=args.topic,
            path=args.path,
            starting=args.starting_offsets,
            ending=args.ending_offsets,
        )
        print(f"exported {count} records of {args.topic} to {args.path}")
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
