"""Tidelog for PySpark: the `tidelog` data source (tidelog.spark.source).

    import tidelog.spark
    tidelog.spark.register(spark)

Importing this package also registers the source with the active Spark session, if there is one.
"""

from __future__ import annotations

from typing import Any

__all__ = ["register"]


def register(spark: Any = None) -> None:
    """Register the `tidelog` format with `spark` (default: the active session)."""
    from pyspark.sql import SparkSession  # noqa: PLC0415 - PySpark is an optional dependency

    from tidelog.spark.source import TidelogDataSource  # noqa: PLC0415

    session = spark or SparkSession.getActiveSession()
    if session is None:
        raise RuntimeError("no active Spark session: pass one, tidelog.spark.register(spark)")
    session.dataSource.register(TidelogDataSource)


def _register_with_active_session() -> None:
    try:
        from pyspark.sql import SparkSession  # noqa: PLC0415
    except ImportError:
        return
    if SparkSession.getActiveSession() is not None:
        register()


_register_with_active_session()
