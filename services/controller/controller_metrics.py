"""Prometheus view of the cluster from the controller: kafka_exporter's cluster, topic and
partition metrics, and the KafkaController MBeans, read at scrape time from the active controller's
copy of the metadata (written as text per scrape: tidelog.server_common.metrics_http), so the figures
cannot drift from what it holds.

Only the active controller exports cluster state (standbys hold none, and a scrape of every pod
must not count a partition twice); every controller exports ActiveControllerCount, 1 or 0, so its
sum is the number of active controllers, which alerts check is exactly 1. Per-partition series stop
at `controller.metrics.partition.series.max` partitions: beyond it only per-topic and cluster
figures are exported, which bounds the scrape and Prometheus's series count.
"""

from __future__ import annotations

from tidelog.controller.controller import Controller
from tidelog.server_common.metrics_http import add_text_source, family_text

__all__ = ["ControllerCollector", "register"]

PER_PARTITION = (
    "kafka_topic_partition_leader",
    "kafka_topic_partition_replicas",
    "kafka_topic_partition_in_sync_replica",
    "kafka_topic_partition_leader_is_preferred",
    "kafka_topic_partition_under_replicated_partition",
)


class ControllerCollector:
    def __init__(self, controller: Controller, partition_series_max: int) -> None:
        self.controller = controller
        self.partition_series_max = partition_series_max

    def text(self) -> str:
        """Every family of this collector as exposition text (tidelog.server_common.metrics_http): with
        thousands of partitions the per-partition ones are most of a scrape."""
        active = self.controller.role.is_active
        count = family_text("kafka_controller_kafkacontroller_activecontrollercount", [("", 1 if active else 0)])
        if not active:
            return count
        state = self.controller.state
        # Copies taken at once (each a single C call under the GIL): the event loop goes on changing
        # the dicts while this scrape thread reads them.
        brokers = list(state.brokers.values())
        topics = list(state.topics.items())
        partitions = dict(state.partitions)

        info = [
            (f'{{id="{b.broker_id}",address="{b.endpoint}",rack="{b.rack}"}}', 1)
            for b in sorted(brokers, key=lambda b: b.broker_id)
        ]
        per_topic: list[tuple[str, int]] = []
        series: dict[str, list[tuple[str, int]]] = {name: [] for name in PER_PARTITION}
        total = offline = 0
        for topic, versioned in sorted(topics):
            assignment = versioned.value.assignment
            per_topic.append((f'{{topic="{topic}"}}', len(assignment)))
            for key, replicas in assignment.items():
                held = partitions.get((topic, int(key)))
                leader, isr = (held.value.leader, held.value.isr) if held is not None else (-1, [])
                total += 1
                offline += leader == -1
                if total > self.partition_series_max:
                    continue
                labels = f'{{topic="{topic}",partition="{key}"}}'
                series["kafka_topic_partition_leader"].append((labels, leader))
                series["kafka_topic_partition_replicas"].append((labels, len(replicas)))
                series["kafka_topic_partition_in_sync_replica"].append((labels, len(isr)))
                preferred = bool(replicas) and leader == replicas[0]
                series["kafka_topic_partition_leader_is_preferred"].append((labels, int(preferred)))
                series["kafka_topic_partition_under_replicated_partition"].append(
                    (labels, int(len(isr) < len(replicas)))
                )
        return "".join(
            [
                count,
                family_text("kafka_brokers", [("", len(brokers))]),
                family_text("kafka_broker_info", info),
                family_text("kafka_topic_partitions", per_topic),
                *(family_text(name, samples) for name, samples in series.items()),
                family_text("kafka_controller_kafkacontroller_offlinepartitionscount", [("", offline)]),
                family_text("kafka_controller_kafkacontroller_globalpartitioncount", [("", total)]),
                family_text("kafka_controller_kafkacontroller_globaltopiccount", [("", len(topics))]),
            ]
        )


def register(controller: Controller, partition_series_max: int) -> ControllerCollector:
    collector = ControllerCollector(controller, partition_series_max)
    add_text_source(collector.text)
    return collector
