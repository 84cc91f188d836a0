"""`LocalCluster` as tests, benchmarks and `tidelog dev up` use it: processes found, killed and
restarted by role and name; a wait that says what it waits for."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.cluster.conftest import COORDINATOR_ARGS, started_cluster
from tidelog.client import AdminClient


async def test_processes_by_role_restart_and_a_named_wait(tmp_path: Path) -> None:
    async with started_cluster(tmp_path / "cluster", coordinators=1, coordinator_args=COORDINATOR_ARGS) as cluster:
        assert cluster.names("broker") == ["broker-1", "broker-2", "broker-3"]
        assert cluster.names("coordinator") == ["coordinator-1"]
        with pytest.raises(ValueError, match="broker-2 is running"):
            cluster.start_process("broker-2")
        with pytest.raises(ValueError, match="no such role"):
            cluster.start_process("zookeeper-1")

        first = cluster.processes["broker-2"].pid
        cluster.restart("broker-2", signal.SIGKILL)  # a crash, and straight back within its session
        assert cluster.processes["broker-2"].pid != first
        await cluster.wait_ready(timeout_s=30)  # the new life takes its registration over at once

        cluster.signal("broker-3", signal.SIGTERM)  # gracefully: its registration goes at once
        with pytest.raises(TimeoutError, match=r"brokers \[3\] not registered"):
            await cluster.wait_ready(timeout_s=2)
        cluster.start_process("broker-3")
        await cluster.wait_ready(timeout_s=30)
        async with AdminClient(cluster.bootstrap, controllers=cluster.controller_endpoints) as admin:
            assert sorted(b.broker_id for b in (await admin.describe_cluster()).brokers) == [1, 2, 3]
