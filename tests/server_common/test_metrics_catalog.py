"""The metric catalog: docs/metrics.md is generated from it, and kafka_exporter's names and labels
are the ones Kafka dashboards query."""

from __future__ import annotations

from pathlib import Path

from tidelog.server_common.metrics_catalog import KAFKA_EXPORTER, METRICS, Kind, by_name, render_markdown

ROOT = Path(__file__).resolve().parents[2]

# kafka_exporter's metrics and their labels (danielqsj/kafka_exporter's README), which community
# dashboards and alert sets are written against.
KAFKA_EXPORTER_METRICS = {
    "kafka_brokers": (),
    "kafka_broker_info": ("id", "address"),
    "kafka_topic_partitions": ("topic",),
    "kafka_topic_partition_current_offset": ("topic", "partition"),
    "kafka_topic_partition_oldest_offset": ("topic", "partition"),
    "kafka_topic_partition_leader": ("topic", "partition"),
    "kafka_topic_partition_replicas": ("topic", "partition"),
    "kafka_topic_partition_in_sync_replica": ("topic", "partition"),
    "kafka_topic_partition_leader_is_preferred": ("topic", "partition"),
    "kafka_topic_partition_under_replicated_partition": ("topic", "partition"),
    "kafka_consumergroup_current_offset": ("consumergroup", "topic", "partition"),
    "kafka_consumergroup_current_offset_sum": ("consumergroup", "topic"),
    "kafka_consumergroup_lag": ("consumergroup", "topic", "partition"),
    "kafka_consumergroup_lag_sum": ("consumergroup", "topic"),
    "kafka_consumergroup_members": ("consumergroup",),
}


def test_the_docs_are_generated_from_the_catalog() -> None:
    documented = (ROOT / "docs" / "metrics.md").read_text()
    assert documented == render_markdown(), "run: python -m tidelog.server_common.metrics_catalog > docs/metrics.md"


def test_kafka_exporters_metrics_are_all_there_with_its_labels() -> None:
    ours = {metric.name: metric for metric in METRICS if metric.kafka == KAFKA_EXPORTER}
    assert set(ours) == set(KAFKA_EXPORTER_METRICS)
    for name, labels in KAFKA_EXPORTER_METRICS.items():
        assert set(labels) <= set(ours[name].labels), name  # a label of ours beyond theirs is harmless
        assert ours[name].kind is Kind.GAUGE


def test_counters_are_named_as_prometheus_and_strimzi_name_them() -> None:
    for metric in METRICS:
        if metric.kind is Kind.COUNTER:
            assert metric.name.endswith("_total") and metric.base_name + "_total" == metric.name
    assert by_name("kafka_server_replicamanager_isrshrinks_total").kafka.endswith("IsrShrinksPerSec")
