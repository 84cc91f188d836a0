"""A Spark driver for tests/spark/test_exactly_once.py, run as its own process so the test can
kill it with SIGKILL: copies a topic with the exactly-once sink, a few records a micro-batch, from
a checkpoint it resumes from when started again, until it is killed.

    python tests/spark/exactly_once_driver.py BOOTSTRAP SOURCE TARGET CHECKPOINT PER_TRIGGER
"""

from __future__ import annotations

import os
import sys
from typing import Any


def main() -> None:
    bootstrap, source, target, checkpoint, per_trigger = sys.argv[1:6]
    from pyspark.sql import SparkSession  # noqa: PLC0415 - only in the driver process

    import tidelog.spark  # noqa: PLC0415

    os.environ["PYSPARK_PYTHON"] = sys.executable
    spark = (
        SparkSession.builder.master("local[2,3]")
        .appName("tidelog-exactly-once")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    tidelog.spark.register(spark)
    query = start_copy(spark, bootstrap, source, target, checkpoint=checkpoint, per_trigger=int(per_trigger))
    print("started", query.id, flush=True)
    query.awaitTermination()  # until the test kills this process


def start_copy(spark: Any, bootstrap: str, source: str, target: str, *, checkpoint: str, per_trigger: int) -> Any:
    """The streaming copy this driver runs (the test's short version runs it in its own session)."""
    stream = (
        spark.readStream.format("tidelog")
        .option("tidelog.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", per_trigger)
        .load()
        .selectExpr("key", "value", "partition")
    )
    return (
        stream.writeStream.format("tidelog")
        .option("tidelog.bootstrap.servers", bootstrap)
        .option("topic", target)
        .option("exactlyOnce", "true")
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="200 milliseconds")
        .start()
    )


if __name__ == "__main__":
    main()
