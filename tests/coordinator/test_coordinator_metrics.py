"""The coordinator's metrics are read from its state at scrape time."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from tidelog.client import TopicPartition
from tidelog.coordinator.coordinator_metrics import CoordinatorCollector

from .test_group_coordinator import RecordingWriter, _commit, coordinator, join


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


class _Ends:
    """EndOffsets' answer, as the collector reads it."""

    def __init__(self, latest: dict[TopicPartition, int]) -> None:
        self.latest = latest


async def test_every_partition_of_a_committed_topic_has_lag_and_one_never_committed_is_minus_one() -> None:
    """Issue 32: a partition the group never committed had no series, so a stopped group's backlog
    showed about half of itself. As kafka_exporter: -1 for current offset and lag, out of the sums."""
    group_coordinator = coordinator(RecordingWriter())
    ends = {TopicPartition("t", 0): 100, TopicPartition("t", 1): 50, TopicPartition("other", 0): 7}
    registry = CollectorRegistry()
    registry.register(CoordinatorCollector(group_coordinator, _Ends(ends)))  # type: ignore[arg-type]
    await group_coordinator.commit_offsets(_commit(40))  # t-0 only
    labels = {"consumergroup": "g", "topic": "t"}
    assert registry.get_sample_value("kafka_consumergroup_current_offset", {**labels, "partition": "0"}) == 40
    assert registry.get_sample_value("kafka_consumergroup_lag", {**labels, "partition": "0"}) == 60
    assert registry.get_sample_value("kafka_consumergroup_current_offset", {**labels, "partition": "1"}) == -1
    assert registry.get_sample_value("kafka_consumergroup_lag", {**labels, "partition": "1"}) == -1
    assert registry.get_sample_value("kafka_consumergroup_lag_sum", labels) == 60
    assert registry.get_sample_value("kafka_consumergroup_current_offset_sum", labels) == 40
    # A topic the group never committed to is not the group's: no series (kafka_exporter's rule).
    other = {"consumergroup": "g", "topic": "other", "partition": "0"}
    assert registry.get_sample_value("kafka_consumergroup_lag", other) is None
