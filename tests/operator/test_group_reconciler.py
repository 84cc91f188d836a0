"""The ConsumerGroup reconciler against a real cluster with group coordinators and real members:
status from the coordinators, an offset reset that waits while members exist and applies once."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.cluster.conftest import COORDINATOR_ARGS, poll_until, started_cluster
from tidelog.client import AdminClient, GroupConsumer, Producer, TopicPartition
from tidelog.client.group_admin import GroupAdmin
from tidelog.dev.local_cluster import LocalCluster
from tidelog.operator.group_reconciler import GroupReconciler, GroupSpec

TOPIC = "events"


@pytest.fixture
async def group_cluster(tmp_path: Path) -> AsyncIterator[LocalCluster]:
    async with started_cluster(tmp_path / "cluster", coordinators=1, coordinator_args=COORDINATOR_ARGS) as cluster:
        async with AdminClient(cluster.bootstrap, controllers=cluster.controller_endpoints) as admin:
            await admin.create_topic(TOPIC, 2, 1)
        async with Producer(cluster.bootstrap) as producer:
            await (await producer.send_batch(TOPIC, [b"%03d" % n for n in range(100)], partition=0))
        yield cluster


@pytest.fixture
async def reconciler(group_cluster: LocalCluster) -> AsyncIterator[GroupReconciler]:
    async with (
        GroupAdmin(group_cluster.bootstrap) as groups,
        AdminClient(group_cluster.bootstrap, controllers=group_cluster.controller_endpoints) as admin,
    ):
        yield GroupReconciler(groups, admin)


async def test_status_shows_members_assignment_and_lag_and_a_reset_waits_then_applies_once(
    group_cluster: LocalCluster, reconciler: GroupReconciler
) -> None:
    member = GroupConsumer(group_cluster.bootstrap, "billing", auto_offset_reset="earliest", enable_auto_commit=False)
    member.subscribe([TOPIC])
    await poll_until(member, 40, what="some records read")
    await member.commit({TopicPartition(TOPIC, 0): 40})
    spec = GroupSpec.from_resource("billing", {"resetOffsets": {"id": "replay-1", "to": "earliest", "topics": [TOPIC]}})
    waiting = await reconciler.reconcile(spec, last_reset=None)
    assert (waiting.ready, waiting.reason) == (False, "ResetWaiting")
    status = waiting.status
    assert status["state"] == "Stable" and status["memberCount"] == 1 and status["protocol"]
    assert sorted(status["members"][0]["partitions"]) == [f"{TOPIC}-0", f"{TOPIC}-1"]
    lag = {(entry["topic"], entry["partition"]): entry for entry in status["offsets"]}
    assert (lag[(TOPIC, 0)]["end"], lag[(TOPIC, 0)]["committed"], lag[(TOPIC, 0)]["lag"]) == (100, 40, 60)
    assert status["totalLag"] == status["lagByTopic"][TOPIC] == 60

    await member.close()  # leaves the group: the reset may go now
    applied = await reconciler.reconcile(spec, last_reset=None)
    assert (applied.ready, applied.status["lastReset"]) == (True, "replay-1")
    assert [event[1] for event in applied.events] == ["OffsetsReset"]
    committed = {(e["topic"], e["partition"]): e.get("committed") for e in applied.status["offsets"]}
    assert committed[(TOPIC, 0)] == 0 and committed[(TOPIC, 1)] == 0
    assert applied.status["totalLag"] == 100

    again = await reconciler.reconcile(spec, last_reset="replay-1")  # once per id
    assert again.ready and again.events == []


async def test_a_missing_group_is_dead_and_deleting_it_is_done(reconciler: GroupReconciler) -> None:
    spec = GroupSpec.from_resource("nobody", {})
    outcome = await reconciler.reconcile(spec, last_reset=None)
    assert outcome.ready and outcome.status["state"] == "Dead"
    assert (await reconciler.delete(spec)).ready
