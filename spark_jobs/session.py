"""The Spark session a job runs in: the one spark-submit made, or a local one (all cores) when the
job is run as a plain Python module; either way with the `tidelog` format registered."""

from __future__ import annotations

import os
import sys
from typing import Any

from tidelog.common.local_endpoints import local_bootstrap


def session(app_name: str) -> Any:
    from pyspark.sql import SparkSession  # noqa: PLC0415 - PySpark is the spark extra

    import tidelog.spark  # noqa: PLC0415

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # executors run this interpreter
    builder = SparkSession.builder.appName(app_name)
    if "PYSPARK_GATEWAY_PORT" not in os.environ:  # not under spark-submit, whose --master stands
        builder = builder.master(os.environ.get("TIDELOG_SPARK_MASTER", "local[*]"))
    spark = builder.config("spark.sql.session.timeZone", "UTC").getOrCreate()
    tidelog.spark.register(spark)
    return spark


def bootstrap_of(given: str | None) -> str:
    """--bootstrap, else the local `tidelog dev up` cluster's brokers (as the `tidelog` commands
    find them), else localhost:9292, the brokers' gRPC port under `dev up`; a guess is said on stderr."""
    if given:
        return given
    found = local_bootstrap()
    if found is None:
        print("no --bootstrap given and no local cluster found: trying localhost:9292", file=sys.stderr)
        return "localhost:9292"
    return ",".join(found)
