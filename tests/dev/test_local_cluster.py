"""`LocalCluster` as tests, benchmarks and `tidelog dev up` use it: processes found, killed and
restarted by role and name; a wait that says what it waits for."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest

from tests.cluster.conftest import COORDINATOR_ARGS, started_cluster
from tidelog.client import AdminClient
from tidelog.dev.local_cluster import LocalCluster


async def test_processes_by_role_restart_and_a_named_wait(tmp_path: Path) -> None:
    async with started_cluster(tmp_path / "cluster", coordinators=1, coordinator_args=COORDINATOR_ARGS) as cluster:
        assert cluster.names("broker") == ["broker-1", "broker-2", "broker-3"]
        assert cluster.names("coordinator") == ["coordinator-1"]
        with pytest.raises(ValueError, match="broker-2 is running"):
            cluster.start_process("broker-2")
        with pytest.raises(ValueError, match="no such role"):
            cluster.start_process("zookeeper-1")

        async with AdminClient(cluster.bootstrap, controllers=cluster.controller_endpoints) as admin:
            first = {b.broker_id: b.incarnation for b in (await admin.describe_cluster()).brokers}[2]
            cluster.signal("broker-2", signal.SIGKILL)  # a crash: its registration outlives it a moment
            with pytest.raises(TimeoutError, match=r"brokers \[2\] (not registered|registered but not serving)"):
                await cluster.wait_ready(timeout_s=1)  # the dead life's registration is not readiness
            cluster.start_process("broker-2")  # straight back, within its session
            await cluster.wait_ready(timeout_s=30)
            # Ready means the new life's registration: it stays (CI once saw wait_ready pass on the
            # dead life's, which the controller's probe then revoked while the new one started).
            now = {b.broker_id: b.incarnation for b in (await admin.describe_cluster()).brokers}
            assert sorted(now) == [1, 2, 3] and now[2] != first

        cluster.signal("broker-3", signal.SIGTERM)  # gracefully: its registration goes at once
        with pytest.raises(TimeoutError, match=r"brokers \[3\] not registered"):
            await cluster.wait_ready(timeout_s=2)
        cluster.start_process("broker-3")
        await cluster.wait_ready(timeout_s=30)
        async with AdminClient(cluster.bootstrap, controllers=cluster.controller_endpoints) as admin:
            assert sorted(b.broker_id for b in (await admin.describe_cluster()).brokers) == [1, 2, 3]


def test_an_etcd_that_exited_is_not_alive(tmp_path: Path) -> None:
    """An etcd that lost its port exits while another process may answer there: the cluster is
    not alive (wait_ready's and `tidelog dev up`'s check), however ready its port looks."""
    cluster = LocalCluster(tmp_path / "cluster")
    cluster.check_alive()  # nothing started, nothing exited
    cluster.etcd.process = subprocess.Popen(["sh", "-c", "exit 3"])  # type: ignore[union-attr]
    cluster.etcd.process.wait()  # type: ignore[union-attr]
    with pytest.raises(RuntimeError, match="etcd exited with 3"):
        cluster.check_alive()
