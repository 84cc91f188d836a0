"""kafka_exporter's whole family from one target: the active controller (issue 32).

kafka_exporter is one process that asks the cluster for partition offsets and group offsets and
serves them all; dashboards built for it pin `instance="$instance"` taken from
`label_values(kafka_consumergroup_current_offset, instance)`, so every series must come from one
scrape target. The active controller already serves the cluster-state half (controller_metrics);
this view adds the other half as kafka_exporter gathers it — as a client of the cluster, every
`controller.metrics.exporter.refresh.ms` while someone scrapes it — once before each scrape, when
the scrapes come slower than that (scrape_pace.py, ADR 0033):

- each partition's log end and log start offsets: ListOffsets to the leaders, one request per
  broker, whose answers carry log start, high watermark and last stable offset together
  (`Consumer.offset_ranges`; `kafka_topic_partition_current_offset` / `_oldest_offset`);
- each group: ListGroups, then DescribeGroups and OffsetFetch at its coordinator
  (`kafka_consumergroup_members`, `_current_offset`, `_lag` and their sums), lag measured against
  the offsets of the same refresh. As kafka_exporter, every partition of a topic a group committed
  to has series: -1 for a partition it never committed (kept out of the sums).
- beyond kafka_exporter, each group's lag against the partitions' last stable offsets
  (`tidelog_consumergroup_lag_stable`, `_sum`): a read_committed group's real lag, which the high
  watermark overstates by the open and aborted transactions' records it never reads.

Nothing else exports these names, so no scrape of every pod counts them twice; a scrape reports
the latest refresh (kafka_exporter asks at each scrape: here a scrape never waits on the cluster).
Standby controllers export none. Per-partition series stop at
`controller.metrics.partition.series.max` partitions, as the cluster-state ones do.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from typing import Final

import structlog

from tidelog.client import TopicPartition
from tidelog.client.group_admin import GroupAdmin
from tidelog.common.errors import TidelogError
from tidelog.common.settings import ControllerSettings
from tidelog.controller.controller import Controller
from tidelog.controller.scrape_pace import ScrapePace
from tidelog.server_common.metrics_http import add_text_source, family_text

__all__ = ["ExporterView", "GroupFigures", "register"]

log = structlog.get_logger(__name__)
NOT_COMMITTED: Final = -1  # kafka_exporter's current offset and lag of a partition never committed


@dataclasses.dataclass(frozen=True, slots=True)
class GroupFigures:
    group_id: str
    members: int
    committed: dict[TopicPartition, int]  # what the group committed (never -1 here)


@dataclasses.dataclass(frozen=True, slots=True)
class Snapshot:
    """One refresh's answers, replaced whole (the scrape thread reads it while the loop refreshes)."""

    latest: dict[TopicPartition, int] = dataclasses.field(default_factory=dict)
    oldest: dict[TopicPartition, int] = dataclasses.field(default_factory=dict)
    stable: dict[TopicPartition, int] = dataclasses.field(default_factory=dict)  # last stable offsets
    groups: tuple[GroupFigures, ...] = ()


class ExporterView:
    def __init__(
        self,
        controller: Controller,
        client: Callable[[list[str]], GroupAdmin],
        settings: ControllerSettings,
    ) -> None:
        self.controller = controller
        self.client = client  # a group admin (and its consumer) for a bootstrap list: made once brokers exist
        self.refresh_s = settings.controller_metrics_exporter_refresh_ms / 1000
        self.partition_series_max = settings.controller_metrics_partition_series_max
        self.snapshot = Snapshot()
        self._admin: GroupAdmin | None = None
        self.pace = ScrapePace()
        # The controller epoch whose offsets the view holds: a term starts with a refresh, so its
        # first scrape finds figures (and none of another term's).
        self._refreshed_epoch: int | None = None

    def _partitions(self) -> list[TopicPartition]:
        topics = list(self.controller.state.topics.items())
        found: list[TopicPartition] = []
        for topic, versioned in sorted(topics):
            for key in sorted(versioned.value.assignment, key=int):
                if len(found) >= self.partition_series_max:
                    return found
                found.append(TopicPartition(topic, int(key)))
        return found

    async def refresh(self) -> None:
        if not self.controller.role.is_active:
            self.snapshot = Snapshot()
            self._refreshed_epoch = None
            return
        if self._admin is None:
            bootstrap = sorted(broker.endpoint for broker in list(self.controller.state.brokers.values()))
            if not bootstrap:
                return
            self._admin = self.client(bootstrap)
        groups = self._admin
        consumer = groups.consumer
        epoch = self.controller.role.epoch
        partitions = self._partitions()
        # One round for all three: three rounds over 10,000 partitions every refresh were half of
        # an idle broker's CPU (1.6 of 3.3 % a broker).
        ranges = await consumer.offset_ranges(partitions) if partitions else {}
        latest = {tp: offsets.high_watermark for tp, offsets in ranges.items()}
        oldest = {tp: offsets.log_start_offset for tp, offsets in ranges.items()}
        stable = {tp: offsets.last_stable_offset for tp, offsets in ranges.items()}
        # The offsets are out before the groups are asked: a cluster whose coordinators are away
        # (or that runs none) still shows its partitions, and its groups' last figures.
        self.snapshot = Snapshot(latest, oldest, stable, self.snapshot.groups)
        self._refreshed_epoch = epoch
        try:
            listed = await groups.list_groups()
        except TidelogError as error:
            log.info("exporter_groups_unavailable", error=str(error))
            return
        figures = []
        for group in listed:
            try:
                described = await groups.describe_group(group.group_id, end_offsets=latest)
            except TidelogError as error:  # deleted or moving meanwhile: next refresh
                log.info("exporter_group_skipped", group=group.group_id, error=str(error))
                continue
            committed = {lag.partition: lag.committed for lag in described.partitions if lag.committed is not None}
            figures.append(GroupFigures(group.group_id, len(described.members), committed))
        self.snapshot = Snapshot(latest, oldest, stable, tuple(figures))

    def refresh_due(self) -> bool:
        """A refresh at this tick: a standby's (it empties the view), a term's first, or one a
        scrape is due for before the next tick's could end."""
        return (
            not self.controller.role.is_active
            or self._refreshed_epoch != self.controller.role.epoch
            or self.pace.refresh_due(self.refresh_s)
        )

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if self.refresh_due():
                started = loop.time()
                try:
                    await self.refresh()
                except Exception as error:  # brokers or coordinators unreachable for now: keep the last figures
                    log.warning("exporter_refresh_failed", error=str(error))
                self.pace.refreshed(loop.time() - started)
            await asyncio.sleep(self.refresh_s)

    async def close(self) -> None:
        if self._admin is not None:
            await self._admin.__aexit__()

    def text(self) -> str:
        if not self.controller.role.is_active:
            return ""
        self.pace.scraped()
        snapshot = self.snapshot
        label = {tp: f'topic="{tp.topic}",partition="{tp.partition}"' for tp in snapshot.latest}
        current = [(f"{{{label[tp]}}}", offset) for tp, offset in sorted(snapshot.latest.items())]
        oldest = [(f"{{{label[tp]}}}", offset) for tp, offset in sorted(snapshot.oldest.items()) if tp in label]
        by_topic: dict[str, list[TopicPartition]] = {}  # once per scrape, not once per group
        for tp in snapshot.latest:
            by_topic.setdefault(tp.topic, []).append(tp)
        members, offsets, offset_sums, lags, lag_sums, stable_lags, stable_sums = [], [], [], [], [], [], []
        for group in sorted(snapshot.groups, key=lambda g: g.group_id):
            members.append((f'{{consumergroup="{group.group_id}"}}', group.members))
            topics = {tp.topic for tp in group.committed}
            everywhere = set(group.committed).union(*(by_topic.get(topic, ()) for topic in topics))
            offset_by_topic: dict[str, int] = {}
            lag_by_topic: dict[str, int] = {}
            stable_by_topic: dict[str, int] = {}
            for tp in sorted(everywhere):
                labels = f'{{consumergroup="{group.group_id}",topic="{tp.topic}",partition="{tp.partition}"}}'
                offset = group.committed.get(tp)
                if offset is None:
                    offsets.append((labels, NOT_COMMITTED))
                    lags.append((labels, NOT_COMMITTED))
                    stable_lags.append((labels, NOT_COMMITTED))
                    continue
                offsets.append((labels, offset))
                offset_by_topic[tp.topic] = offset_by_topic.get(tp.topic, 0) + offset
                end = snapshot.latest.get(tp)
                if end is None:
                    continue
                behind = max(end - offset, 0)
                lags.append((labels, behind))
                lag_by_topic[tp.topic] = lag_by_topic.get(tp.topic, 0) + behind
                if (stable_end := snapshot.stable.get(tp)) is not None:
                    stable_behind = max(stable_end - offset, 0)
                    stable_lags.append((labels, stable_behind))
                    stable_by_topic[tp.topic] = stable_by_topic.get(tp.topic, 0) + stable_behind
            group_label = f'consumergroup="{group.group_id}"'
            offset_sums += [(f'{{{group_label},topic="{t}"}}', v) for t, v in sorted(offset_by_topic.items())]
            lag_sums += [(f'{{{group_label},topic="{t}"}}', v) for t, v in sorted(lag_by_topic.items())]
            stable_sums += [(f'{{{group_label},topic="{t}"}}', v) for t, v in sorted(stable_by_topic.items())]
        return "".join(
            [
                family_text("kafka_topic_partition_current_offset", current),
                family_text("kafka_topic_partition_oldest_offset", oldest),
                family_text("kafka_consumergroup_members", members),
                family_text("kafka_consumergroup_current_offset", offsets),
                family_text("kafka_consumergroup_current_offset_sum", offset_sums),
                family_text("kafka_consumergroup_lag", lags),
                family_text("kafka_consumergroup_lag_sum", lag_sums),
                family_text("tidelog_consumergroup_lag_stable", stable_lags),
                family_text("tidelog_consumergroup_lag_stable_sum", stable_sums),
            ]
        )


def register(
    controller: Controller,
    client: Callable[[list[str]], GroupAdmin],
    settings: ControllerSettings,
) -> ExporterView:
    view = ExporterView(controller, client, settings)
    add_text_source(view.text)
    return view
