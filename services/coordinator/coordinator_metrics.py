"""Prometheus view of a GroupCoordinator: groups by state, members, loaded partitions, rebalances.

Read at scrape time from the coordinator's own state (a custom collector) rather than kept in step
by hand, so the figures cannot drift from what the coordinator holds.
"""

from __future__ import annotations

import collections
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import REGISTRY, Collector

from tidelog.coordinator.group_coordinator import GroupCoordinator
from tidelog.coordinator.group_state import GroupState

__all__ = ["CoordinatorCollector", "register"]


class CoordinatorCollector(Collector):
    def __init__(self, coordinator: GroupCoordinator) -> None:
        self.coordinator = coordinator

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        states: collections.Counter[str] = collections.Counter()
        members = 0
        for groups in self.coordinator.groups.values():
            for group in groups.values():
                states[group.state.value] += 1
                members += len(group.members)
        by_state = GaugeMetricFamily(
            "tidelog_coordinator_groups", "Groups this instance serves, by state", labels=["state"]
        )
        for state in GroupState:
            by_state.add_metric([state.value], states[state.value])
        yield by_state
        yield GaugeMetricFamily("tidelog_coordinator_members", "Members of the groups served here", value=members)
        yield GaugeMetricFamily(
            "tidelog_coordinator_offsets_partitions",
            "__consumer_offsets partitions this instance owns and has loaded",
            value=len(set(self.coordinator.groups) - self.coordinator.loading),
        )
        yield CounterMetricFamily(
            "tidelog_coordinator_rebalances",
            "Rebalances completed (a new generation) by the groups served here",
            value=self.coordinator.rebalances_completed,
        )


def register(coordinator: GroupCoordinator) -> CoordinatorCollector:
    collector = CoordinatorCollector(coordinator)
    REGISTRY.register(collector)
    return collector
