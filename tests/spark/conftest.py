"""Real PySpark in local mode against a real local cluster: one Spark session for the run (a new
session costs seconds to start, issue 37) and one cluster per module."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.conftest import running_cluster
from tidelog.dev.local_cluster import LocalCluster

pyspark = pytest.importorskip("pyspark", reason="PySpark not installed (the spark extra)")
if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
    pytest.skip("no Java runtime for Spark (Debian openjdk-17-jre-headless)", allow_module_level=True)


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with running_cluster(
        Path(tmp_path_factory.mktemp("spark-cluster")),
        brokers=1,
        controllers=1,
        broker_args=[
            "--log-retention-check-interval-ms",
            "200",  # retention soon, for the data-loss test
            "--transaction-partition-verification-enable",
            "false",  # transactions written below the coordinator (tests/transactional_writes.py)
        ],
    ) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from pyspark.sql import SparkSession  # noqa: PLC0415

    import tidelog.spark  # noqa: PLC0415

    os.environ["PYSPARK_PYTHON"] = sys.executable  # executors run this venv's Python
    session = (
        SparkSession.builder.master("local[2,3]")  # 2 threads; a failed task is tried up to 3 times
        .appName("tidelog-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        # The JIT's first tier only and the serial collector: a test session's JVM is short-lived
        # and shares two cores with the suite's other workers (30.5 -> 14.9 CPU-s of JVM over
        # test_kafka_guide.py, ADR 0035)
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    tidelog.spark.register(session)
    yield session
    session.stop()


@pytest.fixture
def bootstrap(spark_cluster: LocalCluster) -> str:
    return ",".join(spark_cluster.bootstrap)
