"""The dashboards: the shipped JSON is what the code generates, and every query names metrics we
export (or etcd's and Prometheus's own). tests/monitoring/test_prometheus.py runs every query."""

from __future__ import annotations

import json
import re

from tidelog.dev.dashboards import DASHBOARDS, OUTPUT, queries, render_all
from tidelog.server_common.metrics_catalog import METRICS, Kind

METRIC_NAME = re.compile(r"\b((?:kafka|tidelog|etcd)_[a-z0-9_]+)\b")
ETCD_METRICS = {
    "etcd_server_has_leader",
    "etcd_server_leader_changes_seen_total",
    "etcd_disk_wal_fsync_duration_seconds_bucket",
    "etcd_mvcc_db_total_size_in_bytes",
}


def test_the_shipped_dashboards_are_the_generated_ones() -> None:
    rendered = render_all()
    shipped = {path.name: path.read_text() for path in OUTPUT.glob("*.json")}
    assert shipped == rendered, "run: python -m tidelog.dev.dashboards"


def test_every_query_names_metrics_we_export() -> None:
    exposed = set(ETCD_METRICS)
    for metric in METRICS:
        exposed.add(metric.name)
        if metric.kind is Kind.HISTOGRAM:
            exposed.update(f"{metric.name}{suffix}" for suffix in ("_bucket", "_sum", "_count"))
    for name, text in render_all().items():
        document = json.loads(text)
        assert document["uid"] and document["title"].startswith("Tidelog / ")
        found = list(queries(document))
        assert found, name
        for title, expr in found:
            for metric in METRIC_NAME.findall(expr):
                assert metric in exposed, f"{name}: {title}: {metric} is not exported"


def test_panels_have_distinct_ids_and_do_not_overlap() -> None:
    for spec in DASHBOARDS:
        document = json.loads(render_all()[f"{spec.uid}.json"])
        ids = [panel["id"] for panel in document["panels"]]
        assert len(ids) == len(set(ids)), spec.uid
        cells = set()
        for panel in document["panels"]:
            grid = panel["gridPos"]
            for x in range(grid["x"], grid["x"] + grid["w"]):
                for y in range(grid["y"], grid["y"] + grid["h"]):
                    assert (x, y) not in cells, f"{spec.uid}: {panel['title']} overlaps"
                    cells.add((x, y))
            assert grid["x"] + grid["w"] <= 24
