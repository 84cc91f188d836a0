"""The coordinator's metrics are read from its state at scrape time."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from tidelog.coordinator.coordinator_metrics import CoordinatorCollector

from .test_group_coordinator import RecordingWriter, coordinator, join


async def test_groups_members_partitions_and_rebalances_are_reported() -> None:
    group_coordinator = coordinator(RecordingWriter())
    registry = CollectorRegistry()
    registry.register(CoordinatorCollector(group_coordinator))
    assert registry.get_sample_value("tidelog_coordinator_offsets_partitions") == 1
    assert registry.get_sample_value("tidelog_coordinator_groups", {"state": "Stable"}) == 0
    joined = await group_coordinator.join_group(join())
    assert joined.generation_id == 1
    assert registry.get_sample_value("tidelog_coordinator_members") == 1
    assert registry.get_sample_value("tidelog_coordinator_groups", {"state": "CompletingRebalance"}) == 1
    assert registry.get_sample_value("tidelog_coordinator_rebalances_total") == 1
    group_coordinator.unload(0)
    assert registry.get_sample_value("tidelog_coordinator_offsets_partitions") == 0
    assert registry.get_sample_value("tidelog_coordinator_members") == 0
