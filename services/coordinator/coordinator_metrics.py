"""Prometheus view of a GroupCoordinator: groups by state, members, loaded partitions and
rebalances, read at scrape time from the coordinator's own state (a custom collector) so the
figures cannot drift from what it holds.

kafka_exporter's group figures (committed offsets, lag, members) are not here: the active
controller serves kafka_exporter's whole family from one target, as kafka_exporter does
(tidelog.controller.exporter_view).
"""

from __future__ import annotations

import collections
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import REGISTRY, Collector

from tidelog.coordinator.group_coordinator import GroupCoordinator
from tidelog.coordinator.group_state import GroupState
from tidelog.server_common.metrics_catalog import counter_family, gauge_family, gauge_value

__all__ = ["CoordinatorCollector", "register"]


class CoordinatorCollector(Collector):
    def __init__(self, coordinator: GroupCoordinator) -> None:
        self.coordinator = coordinator

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        states: collections.Counter[str] = collections.Counter()
        members = 0
        served = [group for groups in list(self.coordinator.groups.values()) for group in list(groups.values())]
        for group in served:
            states[group.state.value] += 1
            members += len(group.members)
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


def register(coordinator: GroupCoordinator) -> CoordinatorCollector:
    collector = CoordinatorCollector(coordinator)
    REGISTRY.register(collector)
    return collector
