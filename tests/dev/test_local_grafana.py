"""Grafana's provisioning for `tidelog dev up`: the local Prometheus as data source and our
dashboards' folder as a provider (no Grafana server can be installed here to start)."""

from __future__ import annotations

from pathlib import Path

import yaml

from tidelog.dev.local_grafana import DASHBOARDS, LocalGrafana


def test_provisioning_points_at_prometheus_and_the_dashboards(tmp_path: Path) -> None:
    root = LocalGrafana(tmp_path / "grafana", 3000, "http://127.0.0.1:9090").provision()
    (source,) = yaml.safe_load((root / "datasources" / "tidelog.yaml").read_text())["datasources"]
    assert (source["type"], source["url"], source["isDefault"]) == ("prometheus", "http://127.0.0.1:9090", True)
    (provider,) = yaml.safe_load((root / "dashboards" / "tidelog.yaml").read_text())["providers"]
    assert Path(provider["options"]["path"]) == DASHBOARDS
    assert sorted(path.name for path in DASHBOARDS.glob("*.json"))  # the files it will load exist
