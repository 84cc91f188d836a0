"""Prometheus view of a GroupCoordinator: kafka_exporter's group figures (committed offsets, lag,
members) for the groups this instance owns, and our own (groups by state, loaded partitions,
rebalances).

Read at scrape time from the coordinator's own state (a custom collector) rather than kept in step
by hand, so the figures cannot drift from what the coordinator holds; only the owner of a group
exports it, so a scrape of every coordinator counts each group once. Lag needs each partition's log
end offset, which the brokers hold: `EndOffsets` asks their leaders for every partition a group here
committed to, every `coordinator.metrics.lag.refresh.ms`, in one request per broker (the client's
list_offsets), and the collector uses the latest answer. A partition never answered has no lag
series rather than a wrong one. As kafka_exporter, every partition of a topic a group committed to
has series: -1 for one never committed.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Iterator
from typing import Final

import structlog
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import REGISTRY, Collector

from tidelog.client import Consumer, TopicPartition
from tidelog.common.metrics_catalog import counter_family, gauge_family, gauge_value
from tidelog.coordinator.group import Group
from tidelog.coordinator.group_coordinator import GroupCoordinator
from tidelog.coordinator.group_state import GroupState

__all__ = ["CoordinatorCollector", "EndOffsets", "register"]

log = structlog.get_logger(__name__)
LATEST: Final = -1  # list_offsets: the log end offset
NOT_COMMITTED: Final = -1  # kafka_exporter's current offset and lag of a partition never committed


class CoordinatorCollector(Collector):
    def __init__(self, coordinator: GroupCoordinator, end_offsets: EndOffsets | None = None) -> None:
        self.coordinator = coordinator
        self.end_offsets = end_offsets

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        states: collections.Counter[str] = collections.Counter()
        members = 0
        served = [group for groups in list(self.coordinator.groups.values()) for group in list(groups.values())]
        for group in served:
            states[group.state.value] += 1
            members += len(group.members)
        yield from self._kafka_exporter_families(served)
        by_state = gauge_family("tidelog_coordinator_groups")
        for state in GroupState:
            by_state.add_metric([state.value], states[state.value])
        yield by_state
        yield gauge_value("tidelog_coordinator_members", members)
        loaded = len(set(self.coordinator.groups) - self.coordinator.loading)
        yield gauge_value("tidelog_coordinator_offsets_partitions", loaded)
        rebalances = counter_family("tidelog_coordinator_rebalances_total")
        rebalances.add_metric([], self.coordinator.rebalances_completed)
        yield rebalances

    def _kafka_exporter_families(self, served: list[Group]) -> Iterator[GaugeMetricFamily]:
        ends = self.end_offsets.latest if self.end_offsets is not None else {}
        current = gauge_family("kafka_consumergroup_current_offset")
        current_sum = gauge_family("kafka_consumergroup_current_offset_sum")
        lag = gauge_family("kafka_consumergroup_lag")
        lag_sum = gauge_family("kafka_consumergroup_lag_sum")
        member_count = gauge_family("kafka_consumergroup_members")
        for group in sorted(served, key=lambda g: g.group_id):
            member_count.add_metric([group.group_id], len(group.members))
            offset_by_topic: dict[str, int] = {}
            lag_by_topic: dict[str, int] = {}
            committed = {key: entry.offset for key, entry in dict(group.offsets).items()}
            topics = {topic for topic, _ in committed}
            # Every partition of a topic the group committed to, as kafka_exporter: one never
            # committed has current offset and lag -1 (kept out of the sums), so a stopped
            # group's backlog shows on every partition rather than on those it happened to commit.
            everywhere = set(committed) | {(tp.topic, tp.partition) for tp in ends if tp.topic in topics}
            for topic, partition in sorted(everywhere):
                labels = [group.group_id, topic, str(partition)]
                offset = committed.get((topic, partition))
                end = ends.get(TopicPartition(topic, partition))
                if offset is None:
                    current.add_metric(labels, NOT_COMMITTED)
                    lag.add_metric(labels, NOT_COMMITTED)
                    continue
                current.add_metric(labels, offset)
                offset_by_topic[topic] = offset_by_topic.get(topic, 0) + offset
                if end is None:
                    continue
                behind = max(end - offset, 0)
                lag.add_metric(labels, behind)
                lag_by_topic[topic] = lag_by_topic.get(topic, 0) + behind
            for topic, total in sorted(offset_by_topic.items()):
                current_sum.add_metric([group.group_id, topic], total)
            for topic, total in sorted(lag_by_topic.items()):
                lag_sum.add_metric([group.group_id, topic], total)
        yield from (current, current_sum, lag, lag_sum, member_count)


class EndOffsets:
    """The log end offset of every partition a group here committed to, refreshed on a timer."""

    def __init__(self, coordinator: GroupCoordinator, consumer: Consumer, refresh_ms: int) -> None:
        self.coordinator = coordinator
        self.consumer = consumer
        self.refresh_s = refresh_ms / 1000
        self.latest: dict[TopicPartition, int] = {}  # replaced whole: the scrape thread reads it

    def topics(self) -> list[str]:
        return sorted(
            {
                topic
                for groups in list(self.coordinator.groups.values())
                for group in list(groups.values())
                for topic, _ in list(group.offsets)
            }
        )

    async def wanted(self) -> list[TopicPartition]:
        """Every partition of every topic a group here committed to (partitions may have been added)."""
        topics = self.topics()
        if not topics:
            return []
        await self.consumer.metadata.refresh(topics)
        return [
            TopicPartition(topic, state.partition)
            for topic in topics
            for state in self.consumer.metadata.partitions.get(topic, [])
        ]

    async def refresh(self) -> None:
        wanted = await self.wanted()
        self.latest = await self.consumer.list_offsets(wanted, LATEST) if wanted else {}

    async def run(self) -> None:
        while True:
            try:
                await self.refresh()
            except Exception as error:  # brokers unreachable for now: keep the last figures
                log.warning("end_offsets_refresh_failed", error=str(error))
            await asyncio.sleep(self.refresh_s)


def register(coordinator: GroupCoordinator, end_offsets: EndOffsets | None = None) -> CoordinatorCollector:
    collector = CoordinatorCollector(coordinator, end_offsets)
    REGISTRY.register(collector)
    return collector
