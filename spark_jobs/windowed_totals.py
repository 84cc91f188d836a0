"""Streaming job: JSON events from a topic → per-user totals over event-time windows → a topic.

    python -m tidelog.spark_jobs.windowed_totals --bootstrap localhost:9292 \\
        --input payments --output payment-totals --checkpoint /tmp/totals-checkpoint

Input records' values are JSON objects {"user": "...", "amount": 12.5, "time": "2026-11-24T10:00:03Z"}.
Each window of --window (default 1 minute) is emitted once the watermark (the latest event time
seen minus --watermark, default 30 seconds) has passed its end: late events within the watermark
still count, later ones are dropped, as Spark's append mode does. Output records: key = the user,
value = {"window_start", "window_end", "user", "events", "amount"} as JSON. Stop with Ctrl-C; a
restart resumes from the checkpoint (each window is written once).
"""

from __future__ import annotations

import argparse
from typing import Any

from tidelog.spark_jobs.session import bootstrap_of, session

EVENT_SCHEMA = "user string, amount double, time timestamp"


def totals(spark: Any, *, bootstrap: str, source: str, window: str, watermark: str, max_per_trigger: int | None) -> Any:
    """The streaming DataFrame of (key, value) output records."""
    from pyspark.sql import functions as f  # noqa: PLC0415

    reader = (
        spark.readStream.format("tidelog")
        .option("tidelog.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
    )
    if max_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(max_per_trigger))
    events = (
        reader.load()
        .select(f.from_json(f.col("value").cast("string"), EVENT_SCHEMA).alias("event"))
        .select("event.*")
        .where(f.col("user").isNotNull() & f.col("time").isNotNull())
    )
    windowed = (
        events.withWatermark("time", watermark)
        .groupBy(f.window("time", window).alias("window"), "user")
        .agg(f.count(f.lit(1)).alias("events"), f.sum("amount").alias("amount"))
    )
    return windowed.select(
        f.col("user").alias("key"),
        f.to_json(
            f.struct(
                f.date_format("window.start", "yyyy-MM-dd'T'HH:mm:ss'Z'").alias("window_start"),
                f.date_format("window.end", "yyyy-MM-dd'T'HH:mm:ss'Z'").alias("window_end"),
                "user",
                "events",
                "amount",
            )
        ).alias("value"),
    )


def start(spark: Any, args: argparse.Namespace, *, available_now: bool = False) -> Any:
    output = totals(
        spark,
        bootstrap=args.bootstrap,
        source=args.input,
        window=args.window,
        watermark=args.watermark,
        max_per_trigger=args.max_offsets_per_trigger,
    )
    writer = (
        output.writeStream.format("tidelog")
        .outputMode("append")
        .option("tidelog.bootstrap.servers", args.bootstrap)
        .option("topic", args.output)
        .option("checkpointLocation", args.checkpoint)
    )
    writer = writer.trigger(availableNow=True) if available_now else writer.trigger(processingTime=args.trigger)
    return writer.start()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--bootstrap",
        help="broker endpoints host:port,... (default: the local `tidelog dev up` cluster, else localhost:9292)",
    )
    parser.add_argument("--input", required=True, help="topic of JSON events")
    parser.add_argument("--output", required=True, help="topic the window totals go to")
    parser.add_argument("--checkpoint", required=True, help="folder of the query's checkpoint")
    parser.add_argument("--window", default="1 minute")
    parser.add_argument("--watermark", default="30 seconds")
    parser.add_argument("--trigger", default="5 seconds", help="micro-batch interval")
    parser.add_argument("--max-offsets-per-trigger", type=int, default=None)
    parser.add_argument("--available-now", action="store_true", help="process what is there, then stop")
    args = parser.parse_args(argv)
    args.bootstrap = bootstrap_of(args.bootstrap)
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    spark = session("tidelog-windowed-totals")
    query = start(spark, args, available_now=args.available_now)
    try:
        query.awaitTermination()
    except KeyboardInterrupt:
        query.stop()


if __name__ == "__main__":
    main()
