"""`tidelog dev up`'s cluster as a developer's, with the settings Kafka's own development config
(config/server.properties) chooses where they differ from production's defaults."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tidelog.cli.main import build_parser
from tidelog.dev import up as dev_up


class _BuiltError(Exception):
    pass


def test_a_groups_first_consumer_is_assigned_at_once_as_in_kafkas_development_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    built: dict[str, Any] = {}

    def cluster(data_dir: Path, **options: Any) -> None:
        built.update(options)
        raise _BuiltError  # nothing is started: the settings are what this test reads

    monkeypatch.setattr(dev_up, "LocalCluster", cluster)
    with pytest.raises(_BuiltError):
        dev_up.up(build_parser().parse_args(["dev", "up", "--data-dir", str(tmp_path / "data")]))
    # group.initial.rebalance.delay.ms=0: "a better out-of-the-box experience for development
    # and testing" (Kafka's server.properties); the coordinators' own default stays 3000.
    assert built["coordinator_args"] == ["--group-initial-rebalance-delay-ms", "0"]
