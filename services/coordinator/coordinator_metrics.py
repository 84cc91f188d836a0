"""Prometheus view of a GroupCoordinator: groups by state, members, loaded partitions, rebalances.

Read at scrape time from the coordinator's own state (a custom collector) rather than kept in step
by hand, so the figures cannot drift from what the coordinator holds.
"""

from __future__ import annotations

import collections
from collections.abc import Iterator
from typing import TypeVar

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import REGISTRY, Collector

from tidelog.common.metrics_catalog import counter_family, gauge_family
from tidelog.coordinator.group_coordinator import GroupCoordinator
from tidelog.coordinator.group_state import GroupState

__all__ = ["CoordinatorCollector", "register"]

F = TypeVar("F", GaugeMetricFamily, CounterMetricFamily)


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
        by_state = gauge_family("tidelog_coordinator_groups")
        for state in GroupState:
            by_state.add_metric([state.value], states[state.value])
        yield by_state
        yield _single(gauge_family("tidelog_coordinator_members"), members)
        loaded = len(set(self.coordinator.groups) - self.coordinator.loading)
        yield _single(gauge_family("tidelog_coordinator_offsets_partitions"), loaded)
        yield _single(counter_family("tidelog_coordinator_rebalances_total"), self.coordinator.rebalances_completed)


def _single(family: F, value: float) -> F:
    family.add_metric([], value)
    return family


def register(coordinator: GroupCoordinator) -> CoordinatorCollector:
    collector = CoordinatorCollector(coordinator)
    REGISTRY.register(collector)
    return collector
