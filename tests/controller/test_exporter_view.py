"""The active controller's kafka_exporter view (controller/exporter_view.py), from a refresh's
answers to exposition text."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from tidelog.client import TopicPartition
from tidelog.common.settings import ControllerSettings
from tidelog.controller.exporter_view import ExporterView, GroupFigures, Snapshot

_SETTINGS = ControllerSettings.from_configs({"controller.metrics.partition.series.max": 100})


def _view(active: bool) -> ExporterView:
    controller: Any = SimpleNamespace(role=SimpleNamespace(is_active=active))
    return ExporterView(
        controller,
        lambda bootstrap: None,
        ControllerSettings.from_configs({"controller.metrics.partition.series.max": 100}),
    )  # type: ignore[arg-type,return-value]


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_every_partition_of_a_committed_topic_has_lag_and_one_never_committed_is_minus_one() -> None:
    """Issue 32: a partition the group never committed had no series, so a stopped group's backlog
    showed about half of itself. As kafka_exporter: -1 for current offset and lag, out of the sums."""
    view = _view(active=True)
    t0, t1, other = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("other", 0)
    view.snapshot = Snapshot(
        latest={t0: 100, t1: 50, other: 7},
        oldest={t0: 0, t1: 5, other: 0},
        groups=(GroupFigures("g", 2, {t0: 40}),),
    )
    found = _samples(view.text())
    group = (("consumergroup", "g"),)

    def of(name: str, partition: str, topic: str = "t") -> float | None:
        return found.get((name, tuple(sorted((*group, ("topic", topic), ("partition", partition))))))

    assert of("kafka_consumergroup_current_offset", "0") == 40
    assert of("kafka_consumergroup_lag", "0") == 60
    assert of("kafka_consumergroup_current_offset", "1") == -1
    assert of("kafka_consumergroup_lag", "1") == -1
    assert found[("kafka_consumergroup_lag_sum", (*group, ("topic", "t")))] == 60
    assert found[("kafka_consumergroup_current_offset_sum", (*group, ("topic", "t")))] == 40
    assert found[("kafka_consumergroup_members", group)] == 2
    assert of("kafka_consumergroup_lag", "0", topic="other") is None  # never committed to: not the group's
    assert found[("kafka_topic_partition_current_offset", (("partition", "1"), ("topic", "t")))] == 50
    assert found[("kafka_topic_partition_oldest_offset", (("partition", "1"), ("topic", "t")))] == 5


def test_a_groups_stable_lag_counts_to_the_last_stable_offset() -> None:
    """A read_committed group never reads past the last stable offset: its lag against it."""
    view = _view(active=True)
    t0, t1 = TopicPartition("t", 0), TopicPartition("t", 1)
    view.snapshot = Snapshot(
        latest={t0: 100, t1: 50},
        oldest={t0: 0, t1: 0},
        stable={t0: 70, t1: 50},  # an open transaction from offset 70 in partition 0
        groups=(GroupFigures("g", 1, {t0: 40, t1: 50}),),
    )
    found = _samples(view.text())
    labels = (("consumergroup", "g"), ("partition", "0"), ("topic", "t"))
    assert found[("kafka_consumergroup_lag", labels)] == 60
    assert found[("tidelog_consumergroup_lag_stable", labels)] == 30
    assert found[("tidelog_consumergroup_lag_stable_sum", (("consumergroup", "g"), ("topic", "t")))] == 30


def test_a_standby_exports_nothing() -> None:
    view = _view(active=False)
    view.snapshot = Snapshot(latest={TopicPartition("t", 0): 1})
    assert view.text() == ""


async def test_the_view_refreshes_at_a_terms_start_then_only_for_its_scrapes() -> None:
    """ADR 0033: the leaders are asked for every partition's offsets when a scrape will read them,
    not every refresh.ms of a cluster nobody scrapes (a third of an idle broker's CPU at 10,000)."""
    role = SimpleNamespace(is_active=True, epoch=3)
    controller: Any = SimpleNamespace(role=role, state=SimpleNamespace(topics={}, brokers={}))
    view = ExporterView(controller, lambda bootstrap: None, _SETTINGS)  # type: ignore[arg-type,return-value]
    assert view.refresh_due()  # the term's first: its first scrape finds figures
    await view.refresh()  # (no broker yet: nothing asked)
    assert view.refresh_due()  # nothing refreshed yet: asked again
    controller.state.brokers = {1: SimpleNamespace(endpoint="127.0.0.1:1")}
    view.client = lambda bootstrap: SimpleNamespace(  # type: ignore[assignment]
        consumer=SimpleNamespace(offset_ranges=_no_ranges), list_groups=_no_groups
    )
    await view.refresh()
    view.pace.refreshed(0.0)
    assert not view.refresh_due()  # nobody scraped: no refresh
    view.text()
    assert view.refresh_due()  # a scrape came: the next tick refreshes for it
    role.is_active = False
    assert view.refresh_due()  # a standby's refresh empties its view
    await view.refresh()
    assert view.snapshot == Snapshot() and view.text() == ""
    role.is_active, role.epoch = True, 4
    assert view.refresh_due()  # a new term starts with a refresh
    await view.refresh()
    view.pace.refreshed(0.0)
    view.text()
    await view.refresh()
    view.pace.refreshed(0.0)
    assert not view.refresh_due()
    role.epoch = 5  # deposed and elected again between two ticks: the new term refreshes at once
    assert view.refresh_due()


async def _no_ranges(partitions: list[TopicPartition]) -> dict[TopicPartition, Any]:
    return {}


async def _no_groups() -> list[Any]:
    return []
