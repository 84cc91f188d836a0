"""Prometheus view of a broker's replicas, read at scrape time (written as text:
tidelog.server_common.metrics_http) so the figures cannot drift from what the broker holds: the
ReplicaManager MBeans (partitions, leaders, under-replicated, under min ISR), the Partition MBeans
(replicas, at and under min ISR) for the partitions this broker leads (only the leader exports
them, so a scrape of every broker counts each partition once), and each replica's log size.
kafka_exporter's partition offsets come from the active controller (controller/exporter_view.py).

Per-partition series stop at `metrics.partition.series.max` replicas: past it, log sizes are summed
per topic (`partition="all"`) and the Partition MBeans are left out, which bounds a scrape of a broker with
thousands of partitions.
"""

from __future__ import annotations

import shutil
from typing import TYPE_CHECKING

from tidelog.broker.replica_role import ReplicaRole
from tidelog.server_common.metrics_http import add_text_source, family_text

if TYPE_CHECKING:
    from tidelog.broker.replica_manager import ReplicaManager

__all__ = ["BrokerCollector", "register"]


class BrokerCollector:
    def __init__(self, replicas: ReplicaManager, partition_series_max: int) -> None:
        self.replicas = replicas
        self.partition_series_max = partition_series_max

    def text(self) -> str:
        """Every family of this collector as exposition text (tidelog.server_common.metrics_http): the
        per-partition ones are the large part of a broker's scrape."""
        hosted = list(self.replicas.partitions.values())  # one C call: the loop keeps changing the dict
        leaders = under = under_min_isr = 0
        replicas_count: list[tuple[str, int]] = []
        at_min_isr: list[tuple[str, int]] = []
        under_min: list[tuple[str, int]] = []
        size: list[tuple[str, int]] = []
        sizes_beyond: dict[str, int] = {}
        for index, partition in enumerate(sorted(hosted, key=lambda p: (p.topic, p.partition))):
            if partition.role is ReplicaRole.DELETED:
                continue
            log = partition.log
            per_partition = index < self.partition_series_max
            labels = f'{{topic="{partition.topic}",partition="{partition.partition}"}}'
            try:
                log_bytes = log.size_bytes
            except (OSError, ValueError):  # closed under us (deleted, or the broker stopping)
                continue
            if per_partition:
                size.append((labels, log_bytes))
            else:
                sizes_beyond[partition.topic] = sizes_beyond.get(partition.topic, 0) + log_bytes
            if partition.role is not ReplicaRole.LEADER:
                continue
            leaders += 1
            isr, replicas = len(partition.state.isr), len(partition.state.replicas)
            min_isr = log.config.min_insync_replicas
            under += isr < replicas
            under_min_isr += isr < min_isr
            if per_partition:
                replicas_count.append((labels, replicas))
                at_min_isr.append((labels, int(isr == min_isr)))
                under_min.append((labels, int(isr < min_isr)))
        size += [(f'{{topic="{topic}",partition="all"}}', total) for topic, total in sorted(sizes_beyond.items())]
        parts = [
            family_text("kafka_server_replicamanager_partitioncount", [("", len(hosted))]),
            family_text("kafka_server_replicamanager_leadercount", [("", leaders)]),
            family_text("kafka_server_replicamanager_underreplicatedpartitions", [("", under)]),
            family_text("kafka_server_replicamanager_underminisrpartitioncount", [("", under_min_isr)]),
            family_text("kafka_log_log_size", size),
            family_text("kafka_cluster_partition_replicascount", replicas_count),
            family_text("kafka_cluster_partition_atminisr", at_min_isr),
            family_text("kafka_cluster_partition_underminisr", under_min),
        ]
        try:
            disk = shutil.disk_usage(self.replicas.data_dir)
        except OSError:  # the directory is gone or unreadable: no figure rather than a false one
            return "".join(parts)
        parts.append(family_text("tidelog_broker_log_dir_free_bytes", [("", disk.free)]))
        parts.append(family_text("tidelog_broker_log_dir_capacity_bytes", [("", disk.total)]))
        return "".join(parts)


def register(replicas: ReplicaManager, partition_series_max: int) -> BrokerCollector:
    collector = BrokerCollector(replicas, partition_series_max)
    add_text_source(collector.text)
    return collector
