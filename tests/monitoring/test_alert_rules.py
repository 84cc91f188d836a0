"""The alert rules: valid for Prometheus (`promtool check rules`), each firing at its threshold and
silent below it (`promtool test rules` on alerts_test.yaml), and naming only metrics we export."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tidelog.server_common.metrics_catalog import METRICS, Kind

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "helm" / "tidelog" / "files" / "alerts.yaml"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool not found (Debian package prometheus; scripts/install-system-deps)"
)
METRIC_NAME = re.compile(r"\b((?:kafka|tidelog)_[a-z0-9_]+)\b")


def _exposed_names() -> set[str]:
    names = set()
    for metric in METRICS:
        names.add(metric.name)
        if metric.kind is Kind.HISTOGRAM:
            names.update(f"{metric.name}{suffix}" for suffix in ("_bucket", "_sum", "_count"))
    return names


def _rules() -> list[dict[str, object]]:
    return [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]


@needs_promtool
def test_the_rules_are_valid_for_prometheus() -> None:
    assert PROMTOOL is not None
    checked = subprocess.run([PROMTOOL, "check", "rules", str(RULES)], capture_output=True, text=True, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr


@needs_promtool
def test_each_alert_fires_at_its_threshold_and_not_below() -> None:
    assert PROMTOOL is not None
    tested = subprocess.run(
        [PROMTOOL, "test", "rules", "alerts_test.yaml"],
        cwd=Path(__file__).parent,
        capture_output=True,
        text=True,
        check=False,
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_every_alert_is_unit_tested_and_names_only_metrics_we_export() -> None:
    tests = yaml.safe_load((Path(__file__).parent / "alerts_test.yaml").read_text())["tests"]
    tested = {case["alertname"] for test in tests for case in test.get("alert_rule_test", [])}
    exposed = _exposed_names()
    for rule in _rules():
        assert rule["alert"] in tested, f"{rule['alert']} has no promtool test"
        for name in METRIC_NAME.findall(str(rule["expr"])):
            assert name in exposed, f"{rule['alert']}: {name} is not in the metric catalog"
        assert rule["labels"]["severity"] in ("warning", "critical")  # type: ignore[index]
