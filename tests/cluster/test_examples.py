"""The client examples docs/client.md shows run as written against a real cluster."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cluster.conftest import COORDINATOR_ARGS, started_cluster
from tidelog.dev.local_cluster import LocalCluster

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "client"


@pytest.mark.parametrize(
    ("example", "expected"),
    [
        ("produce_and_read_to_end.py", ["acknowledged at offset", "b'hello 2'", "read to the end"]),
        ("sync_script.py", ["written from a script"]),
    ],
)
def test_an_example_runs_as_written(cluster: LocalCluster, example: str, expected: list[str]) -> None:
    _run(cluster, example, expected)


async def test_the_group_example_runs_as_written(tmp_path: Path) -> None:
    async with started_cluster(tmp_path / "cluster", coordinators=1, coordinator_args=COORDINATOR_ARGS) as cluster:
        await asyncio.to_thread(_run, cluster, "group_consumer.py", ["processed 30 records"])


def _run(cluster: LocalCluster, example: str, expected: list[str]) -> None:
    ran = subprocess.run(
        [sys.executable, str(EXAMPLES / example), ",".join(cluster.bootstrap)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    for text in expected:
        assert text in ran.stdout, ran.stdout
    assert ran.stderr == "", ran.stderr  # the library stays silent: nothing configured logging


def test_docs_show_every_example() -> None:
    documented = (EXAMPLES.parents[1] / "docs" / "client.md").read_text()
    for example in EXAMPLES.glob("*.py"):
        assert f"examples/client/{example.name}" in documented
