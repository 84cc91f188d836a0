"""Tidelog's Grafana dashboards, as code (grafana-foundation-sdk, the Grafana 11 build).

`python -m tidelog.dev.dashboards` writes them to `helm/tidelog/files/dashboards/`, from where the
chart ships them as ConfigMaps for Grafana's dashboard sidecar and `tidelog dev up` provisions them;
a test keeps the files current, and another runs every panel's queries against a real Prometheus
scraping a real cluster under load.

Queries use the metric catalog's names (docs/metrics.md) and only PromQL that Prometheus 2.42
accepts. Panels that would be empty on a healthy cluster (errors, failures) add `or vector(0)` so
they show 0, not "No data". `$__rate_interval` is Grafana's; the tests substitute it.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Iterator
from typing import Any, Final

from grafana_foundation_sdk.builders.dashboard import Dashboard, DatasourceVariable, QueryVariable, Row
from grafana_foundation_sdk.builders.prometheus import Dataquery as PrometheusQuery
from grafana_foundation_sdk.builders.stat import Panel as Stat
from grafana_foundation_sdk.builders.timeseries import Panel as Timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import DataSourceRef, GridPos, VariableRefresh

from tidelog.dev.local_grafana import DASHBOARDS as DASHBOARD_FILES

__all__ = ["DASHBOARDS", "OUTPUT", "Panel", "queries", "render_all"]

OUTPUT: Final = DASHBOARD_FILES  # where the chart and `tidelog dev up` take them from
DATASOURCE: Final = DataSourceRef(type_val="prometheus", uid="${datasource}")
RATE: Final = "$__rate_interval"
WIDTH: Final = 24  # Grafana's grid


@dataclasses.dataclass(frozen=True)
class Panel:
    title: str
    queries: tuple[tuple[str, str], ...]  # (PromQL, legend)
    unit: str = "short"
    stat: bool = False  # a single figure rather than a graph
    description: str = ""


def _q(expr: str, legend: str = "") -> tuple[str, str]:
    return (expr, legend)


def _by_topic(counter: str) -> str:
    return f'sum by (topic) (rate({counter}{{topic=~"$topic"}}[{RATE}]))'


def _quantiles(metric: str, selector: str, by: str = "") -> tuple[tuple[str, str], ...]:
    grouping = f"le, {by}" if by else "le"
    legend = f"{{{{{by}}}}} " if by else ""
    return tuple(
        _q(
            f"histogram_quantile({q}, sum by ({grouping}) (rate({metric}_bucket{{{selector}}}[{RATE}])))",
            f"{legend}p{int(q * 100)}",
        )
        for q in (0.5, 0.99)
    )


OVERVIEW: Final = (
    (
        "Cluster",
        [
            Panel("Brokers online", (_q("max(kafka_brokers)"),), stat=True),
            Panel(
                "Active controllers",
                (_q("sum(kafka_controller_kafkacontroller_activecontrollercount)"),),
                stat=True,
                description="Exactly 1 in a healthy cluster.",
            ),
            Panel(
                "Under-replicated partitions",
                (_q("sum(kafka_server_replicamanager_underreplicatedpartitions)"),),
                stat=True,
            ),
            Panel(
                "Offline partitions", (_q("sum(kafka_controller_kafkacontroller_offlinepartitionscount)"),), stat=True
            ),
            Panel("Topics", (_q("max(kafka_controller_kafkacontroller_globaltopiccount)"),), stat=True),
            Panel("Partitions", (_q("max(kafka_controller_kafkacontroller_globalpartitioncount)"),), stat=True),
        ],
    ),
    (
        "Throughput",
        [
            Panel(
                "Records in",
                (_q(f"sum(rate(kafka_server_brokertopicmetrics_messagesin_total[{RATE}]))", "records/s"),),
                unit="ops",
            ),
            Panel(
                "Bytes in / out",
                (
                    _q(f"sum(rate(kafka_server_brokertopicmetrics_bytesin_total[{RATE}]))", "in"),
                    _q(f"sum(rate(kafka_server_brokertopicmetrics_bytesout_total[{RATE}]))", "out"),
                ),
                unit="Bps",
            ),
            Panel(
                "Requests by type",
                (_q(f"sum by (request) (rate(kafka_network_requestmetrics_requests_total[{RATE}]))", "{{request}}"),),
                unit="reqps",
            ),
        ],
    ),
    (
        "Latency",
        [
            Panel(
                "Produce time",
                _quantiles("kafka_network_requestmetrics_totaltimems", 'request="Produce"'),
                unit="ms",
                description="Arrival to answer; with acks=all it includes the followers' replication.",
            ),
            Panel(
                "Fetch time (consumers)",
                _quantiles("kafka_network_requestmetrics_totaltimems", 'request="Fetch"'),
                unit="ms",
            ),
            Panel(
                "I/O queue time",
                _quantiles("kafka_network_requestmetrics_requestqueuetimems", ""),
                unit="ms",
                description="Waiting for a num.io.threads thread: the first sign of a saturated broker.",
            ),
        ],
    ),
    (
        "Replication",
        [
            Panel(
                "ISR shrinks / expands",
                (
                    _q(f"sum(rate(kafka_server_replicamanager_isrshrinks_total[{RATE}]))", "shrinks"),
                    _q(f"sum(rate(kafka_server_replicamanager_isrexpands_total[{RATE}]))", "expands"),
                ),
                unit="ops",
            ),
            Panel(
                "Leaders per broker",
                (_q("sum by (instance) (kafka_server_replicamanager_leadercount)", "{{instance}}"),),
            ),
            Panel(
                "Leader elections",
                (
                    _q(f"sum(rate(kafka_controller_controllerstats_leaderelections_total[{RATE}]))", "all"),
                    _q(f"sum(rate(kafka_controller_controllerstats_uncleanleaderelections_total[{RATE}]))", "unclean"),
                ),
                unit="ops",
            ),
        ],
    ),
)

TOPICS: Final = (
    (
        "Topics",
        [
            Panel(
                "Records in by topic",
                (_q(_by_topic("kafka_server_brokertopicmetrics_messagesin_total"), "{{topic}}"),),
                unit="ops",
            ),
            Panel(
                "Bytes in by topic",
                (_q(_by_topic("kafka_server_brokertopicmetrics_bytesin_total"), "{{topic}}"),),
                unit="Bps",
            ),
            Panel(
                "Bytes out by topic",
                (_q(_by_topic("kafka_server_brokertopicmetrics_bytesout_total"), "{{topic}}"),),
                unit="Bps",
            ),
            Panel(
                "Size on disk by topic (all replicas)",
                (_q('sum by (topic) (kafka_log_log_size{topic=~"$topic"})', "{{topic}}"),),
                unit="bytes",
            ),
            Panel("Partitions", (_q('kafka_topic_partitions{topic=~"$topic"}', "{{topic}}"),)),
            Panel(
                "In-sync replicas, smallest partition",
                (_q('min by (topic) (kafka_topic_partition_in_sync_replica{topic=~"$topic"})', "{{topic}}"),),
            ),
            Panel(
                "Under-replicated partitions by topic",
                (
                    _q(
                        'sum by (topic) (kafka_topic_partition_under_replicated_partition{topic=~"$topic"})',
                        "{{topic}}",
                    ),
                ),
            ),
            Panel(
                "Failed produce requests",
                (
                    _q(
                        "sum by (topic) (rate(kafka_server_brokertopicmetrics_failedproducerequests_total"
                        f'{{topic=~"$topic"}}[{RATE}])) or vector(0)',
                        "{{topic}}",
                    ),
                ),
                unit="reqps",
            ),
        ],
    ),
)

GROUPS: Final = (
    (
        "Consumer groups",
        [
            Panel(
                "Lag by group and topic",
                (
                    _q(
                        'sum by (consumergroup, topic) (kafka_consumergroup_lag_sum{consumergroup=~"$consumergroup"})',
                        "{{consumergroup}} {{topic}}",
                    ),
                ),
            ),
            Panel(
                "Lag by partition",
                (
                    _q(
                        'kafka_consumergroup_lag{consumergroup=~"$consumergroup"}',
                        "{{consumergroup}} {{topic}}-{{partition}}",
                    ),
                ),
            ),
            Panel(
                "Consumption (committed records per second)",
                (
                    _q(
                        "sum by (consumergroup, topic) (rate(kafka_consumergroup_current_offset_sum"
                        f'{{consumergroup=~"$consumergroup"}}[{RATE}]))',
                        "{{consumergroup}} {{topic}}",
                    ),
                ),
                unit="ops",
            ),
            Panel(
                "Members", (_q('kafka_consumergroup_members{consumergroup=~"$consumergroup"}', "{{consumergroup}}"),)
            ),
            Panel(
                "Rebalances",
                (_q(f"sum(rate(tidelog_coordinator_rebalances_total[{RATE}]))", "generations/s"),),
                unit="ops",
            ),
            Panel("Groups by state", (_q("sum by (state) (tidelog_coordinator_groups)", "{{state}}"),)),
        ],
    ),
)

GATEWAY: Final = (
    (
        "REST gateway",
        [
            Panel("Gateways up", (_q('count(up{job=~".*gateway"} == 1)'),), stat=True),
            Panel(
                "Requests by route and status",
                (
                    _q(
                        f"sum by (route, status) (rate(tidelog_gateway_requests_total[{RATE}]))",
                        "{{route}} {{status}}",
                    ),
                ),
                unit="reqps",
            ),
            Panel(
                "Server errors (5xx share)",
                (
                    _q(
                        f'(sum(rate(tidelog_gateway_requests_total{{status=~"5.."}}[{RATE}])) or vector(0))'
                        f" / sum(rate(tidelog_gateway_requests_total[{RATE}]))",
                        "5xx",
                    ),
                ),
                unit="percentunit",
            ),
            Panel("Latency by route", _quantiles("tidelog_gateway_request_seconds", "", by="route"), unit="s"),
            Panel(
                "Records produced / consumed",
                (
                    _q(f"sum(rate(tidelog_gateway_records_produced_total[{RATE}]))", "produced"),
                    _q(f"sum(rate(tidelog_gateway_records_consumed_total[{RATE}]))", "consumed"),
                ),
                unit="ops",
            ),
        ],
    ),
)

INTERNALS: Final = (
    (
        "Coordinators",
        [
            Panel(
                "Group requests by API",
                (_q(f"sum by (api) (rate(tidelog_coordinator_requests_total[{RATE}]))", "{{api}}"),),
                unit="reqps",
            ),
            Panel("Group request time", _quantiles("tidelog_coordinator_request_seconds", "", by="api"), unit="s"),
            Panel(
                "__consumer_offsets partitions loaded",
                (_q("sum by (instance) (tidelog_coordinator_offsets_partitions)", "{{instance}}"),),
            ),
            Panel("Members served", (_q("sum by (instance) (tidelog_coordinator_members)", "{{instance}}"),)),
        ],
    ),
    (
        "Controllers and etcd",
        [
            Panel(
                "Admin requests",
                (
                    _q(
                        f"sum by (method) (rate(tidelog_controller_admin_requests_total[{RATE}])) or vector(0)",
                        "{{method}}",
                    ),
                ),
                unit="reqps",
            ),
            Panel("etcd has a leader", (_q('min(etcd_server_has_leader{job=~".*etcd"})'),), stat=True),
            Panel("etcd sessions held", (_q("sum by (job) (tidelog_etcd_sessions)", "{{job}}"),)),
            Panel(
                "etcd sessions lost and keep-alive failures",
                (
                    _q("sum by (job) (increase(tidelog_etcd_session_losses_total[1h]))", "{{job}} lost"),
                    _q(f"sum by (job) (rate(tidelog_etcd_keepalive_failures_total[{RATE}]))", "{{job}} failures/s"),
                ),
                description="A lost session gives up what was held through it: leadership, registration, claims.",
            ),
            Panel(
                "etcd leader changes",
                (_q('sum(increase(etcd_server_leader_changes_seen_total{job=~".*etcd"}[1h]))', "last hour"),),
            ),
            Panel(
                "etcd WAL fsync time",
                _quantiles("etcd_disk_wal_fsync_duration_seconds", 'job=~".*etcd"'),
                unit="s",
            ),
            Panel("etcd database size", (_q('max(etcd_mvcc_db_total_size_in_bytes{job=~".*etcd"})'),), unit="bytes"),
        ],
    ),
    (
        # What Kafka dashboards show of the JVM (memory, GC, threads), for Python processes.
        "Python runtime",
        [
            Panel(
                "Resident memory",
                (_q('process_resident_memory_bytes{job=~"tidelog.*"}', "{{job}} {{instance}}"),),
                unit="bytes",
                description="Stands for the JVM panels' jvm_memory_used_bytes.",
            ),
            Panel(
                "GC pause time",
                (
                    _q(
                        f'sum by (job) (rate(tidelog_python_gc_pause_seconds_sum{{job=~"tidelog.*"}}[{RATE}]))',
                        "{{job}}",
                    ),
                ),
                unit="percentunit",
                description="Share of time paused in garbage collection (the JVM panels' GC time).",
            ),
            Panel(
                "GC pauses, longest",
                _quantiles("tidelog_python_gc_pause_seconds", 'job=~"tidelog.*"', by="job"),
                unit="s",
            ),
            Panel(
                "Threads",
                (_q('tidelog_process_threads{job=~"tidelog.*"}', "{{job}} {{instance}}"),),
                description="OS threads of each process (the JVM panels' jvm_threads_current).",
            ),
            Panel(
                "Event-loop lag",
                _quantiles("tidelog_event_loop_lag_seconds", 'job=~"tidelog.*"', by="job"),
                unit="s",
                description="How late each process's asyncio loop runs a timer: a blocked loop delays every request.",
            ),
        ],
    ),
)


@dataclasses.dataclass(frozen=True)
class DashboardSpec:
    uid: str
    title: str
    rows: tuple[tuple[str, list[Panel]], ...]
    variables: tuple[tuple[str, str], ...] = ()  # (name, label_values query)


DASHBOARDS: Final = (
    DashboardSpec("tidelog-overview", "Tidelog / Cluster overview", OVERVIEW),
    DashboardSpec(
        "tidelog-topics", "Tidelog / Topics", TOPICS, (("topic", "label_values(kafka_topic_partitions, topic)"),)
    ),
    DashboardSpec(
        "tidelog-consumer-groups",
        "Tidelog / Consumer groups",
        GROUPS,
        (("consumergroup", "label_values(kafka_consumergroup_members, consumergroup)"),),
    ),
    DashboardSpec("tidelog-gateway", "Tidelog / REST gateway", GATEWAY),
    DashboardSpec("tidelog-internals", "Tidelog / Coordinators, controllers, etcd and runtime", INTERNALS),
)


def _panel(panel: Panel, position: GridPos, panel_id: int) -> Any:
    builder = (
        (Stat() if panel.stat else Timeseries()).id(panel_id).title(panel.title).datasource(DATASOURCE).unit(panel.unit)
    )
    if panel.description:
        builder = builder.description(panel.description)
    for ref, (expr, legend) in zip("ABCDEFGH", panel.queries, strict=False):
        query = PrometheusQuery().expr(expr).ref_id(ref)
        if legend:
            query = query.legend_format(legend)
        builder = builder.with_target(query)
    return builder.grid_pos(position)


def build(spec: DashboardSpec) -> Dashboard:
    dashboard = (
        Dashboard(spec.title)
        .uid(spec.uid)
        .tags(["tidelog", "generated"])
        .refresh("30s")
        .time("now-1h", "now")
        .with_variable(DatasourceVariable("datasource").label("Prometheus").type("prometheus"))
    )
    for name, query in spec.variables:
        dashboard = dashboard.with_variable(
            QueryVariable(name)
            .label(name)
            .datasource(DATASOURCE)
            .query(query)
            .multi(True)
            .include_all(True)
            .all_value(".*")
            .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
        )
    y = 0
    ids = iter(range(1, 1000))
    for title, panels in spec.rows:
        dashboard = dashboard.with_row(Row(title).id(next(ids)).grid_pos(GridPos(h=1, w=WIDTH, x=0, y=y)))
        y += 1
        per_line = 6 if all(panel.stat for panel in panels) else 3
        width = WIDTH // per_line
        height = 4 if per_line == 6 else 8
        for index, panel in enumerate(panels):
            x = (index % per_line) * width
            if index and index % per_line == 0:
                y += height
            dashboard = dashboard.with_panel(_panel(panel, GridPos(h=height, w=width, x=x, y=y), next(ids)))
        y += height
    return dashboard


def render_all() -> dict[str, str]:
    """File name → dashboard JSON, as written under OUTPUT."""
    encoder = JSONEncoder(sort_keys=True, indent=2)
    return {f"{spec.uid}.json": encoder.encode(build(spec).build()) + "\n" for spec in DASHBOARDS}


def queries(document: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(panel title, PromQL) of every target of a rendered dashboard."""
    for panel in document["panels"]:
        for target in panel.get("targets", []):
            yield panel["title"], target["expr"]


def main() -> None:
    OUTPUT.mkdir(parents=True, exist_ok=True)
    for name, text in render_all().items():
        (OUTPUT / name).write_text(text)
    print(f"wrote {len(DASHBOARDS)} dashboards to {OUTPUT}", file=sys.stderr)


if __name__ == "__main__":
    main()
