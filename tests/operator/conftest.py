"""The operator's tests run against a real local cluster (the cluster tests' fixtures)."""

from tests.cluster.conftest import admin, cluster, topic_name

__all__ = ["admin", "cluster", "topic_name"]
