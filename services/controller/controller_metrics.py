"""Prometheus view of the cluster from the controller: kafka_exporter's cluster, topic and
partition metrics, and the KafkaController MBeans, read at scrape time from the active controller's
copy of the metadata (a custom collector), so the figures cannot drift from what it holds.

Only the active controller exports cluster state (standbys hold none, and a scrape of every pod
must not count a partition twice); every controller exports ActiveControllerCount, 1 or 0, so its
sum is the number of active controllers, which alerts check is exactly 1. Per-partition series stop
at `controller.metrics.partition.series.max` partitions: beyond it only per-topic and cluster
figures are exported, which bounds the scrape and Prometheus's series count.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import REGISTRY, Collector

from tidelog.common.metrics_catalog import gauge_family, gauge_value
from tidelog.controller.controller import Controller

__all__ = ["ControllerCollector", "register"]

PER_PARTITION = (
    "kafka_topic_partition_leader",
    "kafka_topic_partition_replicas",
    "kafka_topic_partition_in_sync_replica",
    "kafka_topic_partition_leader_is_preferred",
    "kafka_topic_partition_under_replicated_partition",
)


class ControllerCollector(Collector):
    def __init__(self, controller: Controller, partition_series_max: int) -> None:
        self.controller = controller
        self.partition_series_max = partition_series_max

    def collect(self) -> Iterator[GaugeMetricFamily]:
        active = self.controller.role.is_active
        count = gauge_family("kafka_controller_kafkacontroller_activecontrollercount")
        count.add_metric([], 1 if active else 0)
        yield count
        if not active:
            return
        state = self.controller.state
        # Copies taken at once (each a single C call under the GIL): the event loop goes on changing
        # the dicts while this scrape thread reads them.
        brokers = list(state.brokers.values())
        topics = list(state.topics.items())
        partitions = dict(state.partitions)

        yield gauge_value("kafka_brokers", len(brokers))
        info = gauge_family("kafka_broker_info")
        for broker in sorted(brokers, key=lambda b: b.broker_id):
            info.add_metric([str(broker.broker_id), broker.endpoint, broker.rack], 1)
        yield info

        per_topic = gauge_family("kafka_topic_partitions")
        families = {name: gauge_family(name) for name in PER_PARTITION}
        total = offline = 0
        for topic, versioned in sorted(topics):
            assignment = versioned.value.assignment
            per_topic.add_metric([topic], len(assignment))
            for key, replicas in assignment.items():
                partition = int(key)
                held = partitions.get((topic, partition))
                leader, isr = (held.value.leader, held.value.isr) if held is not None else (-1, [])
                total += 1
                offline += leader == -1
                if total > self.partition_series_max:
                    continue
                labels = [topic, key]
                families["kafka_topic_partition_leader"].add_metric(labels, leader)
                families["kafka_topic_partition_replicas"].add_metric(labels, len(replicas))
                families["kafka_topic_partition_in_sync_replica"].add_metric(labels, len(isr))
                preferred = bool(replicas) and leader == replicas[0]
                families["kafka_topic_partition_leader_is_preferred"].add_metric(labels, int(preferred))
                under = len(isr) < len(replicas)
                families["kafka_topic_partition_under_replicated_partition"].add_metric(labels, int(under))
        yield per_topic
        yield from families.values()
        yield gauge_value("kafka_controller_kafkacontroller_offlinepartitionscount", offline)
        yield gauge_value("kafka_controller_kafkacontroller_globalpartitioncount", total)
        yield gauge_value("kafka_controller_kafkacontroller_globaltopiccount", len(topics))


def register(controller: Controller, partition_series_max: int) -> ControllerCollector:
    collector = ControllerCollector(controller, partition_series_max)
    REGISTRY.register(collector)
    return collector
