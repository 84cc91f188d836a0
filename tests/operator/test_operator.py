"""The operator as a real kopf process against kmock's Kubernetes emulator (by kopf's author) and a
real local Tidelog cluster: resources applied over the Kubernetes API reach the cluster, and the
resources' status and Events say what happened."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import kmock
import kopf
import pytest

from tests.cluster.conftest import COORDINATOR_ARGS, poll_until, started_cluster, wait_until
from tidelog.client import AdminClient, Consumer, GroupConsumer, Producer, TopicPartition
from tidelog.client.group_admin import GroupAdmin
from tidelog.common.settings import OperatorSettings
from tidelog.dev.kube_emulator import Emulator, serve_crds, write_kubeconfig
from tidelog.dev.local_cluster import LocalCluster
from tidelog.operator.crds import CONSUMER_GROUP_CRD, KOPF_PEERING_CRD, TIDELOG_USER_CRD, TOPIC_CRD, USER_CRD
from tidelog.operator.main import DELETE_RETRY_S, OperatorMemo, _retry_unless_done, retry_delay
from tidelog.operator.topic_reconciler import Outcome

API: str = "/apis/tidelog.io/v1beta1/namespaces/default/topics"
RECONCILE_INTERVAL_MS = 1500  # short, so drift is put back within a test


@pytest.fixture
async def kubernetes(tmp_path: Path) -> AsyncIterator[tuple[str, Path]]:
    """An emulated API server that knows the Topic resource; its URL and a kubeconfig for it."""
    async with Emulator() as emulator, kmock.Server(emulator) as server:
        serve_crds(
            emulator, [TOPIC_CRD, CONSUMER_GROUP_CRD, TIDELOG_USER_CRD, USER_CRD, KOPF_PEERING_CRD]
        )  # replicas meet in the peering
        url = str(server.url).rstrip("/")
        kubeconfig = write_kubeconfig(url, tmp_path / "kubeconfig")
        yield url, kubeconfig


def _start_operator(
    kubeconfig: Path, cluster: LocalCluster, log_path: Path, *extra: str
) -> tuple[subprocess.Popen[bytes], Any]:
    arguments = [sys.executable, "-m", "tidelog.operator.main", *extra]
    for endpoint in cluster.bootstrap:
        arguments += ["--bootstrap", endpoint]
    for endpoint in cluster.controller_endpoints:
        arguments += ["--controller", endpoint]
    arguments += ["--config", f"operator.reconcile.interval.ms={RECONCILE_INTERVAL_MS}"]
    log = log_path.open("wb")
    process = subprocess.Popen(arguments, env={**os.environ, "KUBECONFIG": str(kubeconfig)}, stdout=log, stderr=log)
    return process, log


async def _stop_operator(process: subprocess.Popen[bytes], log: Any) -> int:
    """SIGTERM, then SIGKILL after 10 s; the exit status (negative: killed by that signal). Waited
    for in a thread: the API emulator answers on this event loop, and a peered replica's stop
    patches its peering entry (a blocking wait here held that answer until the kill, 10 s)."""
    process.terminate()
    with contextlib.suppress(subprocess.TimeoutExpired):
        await asyncio.to_thread(process.wait, 10)
    process.kill()
    returncode = process.wait()
    log.close()
    return returncode


@pytest.fixture
async def operator_process(
    kubernetes: tuple[str, Path], cluster: LocalCluster, tmp_path: Path
) -> AsyncIterator[subprocess.Popen[bytes]]:
    process, log = _start_operator(kubernetes[1], cluster, tmp_path / "operator.log", "--standalone")
    try:
        yield process
    finally:
        await _stop_operator(process, log)


class Kube:
    """What kubectl would do, over the emulator's HTTP API."""

    def __init__(self, url: str, session: aiohttp.ClientSession) -> None:
        self.url, self.session = url, session

    async def apply(self, name: str, spec: dict[str, Any]) -> None:
        body = {"apiVersion": "tidelog.io/v1beta1", "kind": "Topic", "metadata": {"name": name, "namespace": "default"}}
        async with self.session.post(f"{self.url}{API}", json={**body, "spec": spec}) as answer:
            assert answer.status in (200, 201), await answer.text()

    async def patch_spec(self, name: str, spec: dict[str, Any]) -> None:
        headers = {"Content-Type": "application/merge-patch+json"}
        async with self.session.patch(f"{self.url}{API}/{name}", json={"spec": spec}, headers=headers) as answer:
            assert answer.status == 200, await answer.text()

    async def get(self, name: str) -> dict[str, Any] | None:
        async with self.session.get(f"{self.url}{API}/{name}") as answer:
            if answer.status == 404:
                return None
            found: dict[str, Any] = await answer.json()
            return found

    async def delete(self, name: str) -> None:
        async with self.session.delete(f"{self.url}{API}/{name}") as answer:
            assert answer.status in (200, 202), await answer.text()

    async def ready(self, name: str) -> dict[str, Any] | None:
        """The Ready condition once the operator has set one."""
        found = await self.get(name)
        conditions = ((found or {}).get("status") or {}).get("conditions") or []
        return next((condition for condition in conditions if condition["type"] == "Ready"), None)

    async def events(self, name: str) -> list[tuple[str, str]]:
        async with self.session.get(f"{self.url}/api/v1/namespaces/default/events") as answer:
            items = (await answer.json()).get("items", [])
        return [
            (item.get("type", ""), item.get("reason", "")) for item in items if item["involvedObject"]["name"] == name
        ]


@pytest.fixture
async def kube(kubernetes: tuple[str, Path]) -> AsyncIterator[Kube]:
    async with aiohttp.ClientSession() as session:
        yield Kube(kubernetes[0], session)


async def _has_event(kube: Kube, name: str, event: tuple[str, str]) -> bool:
    return event in await kube.events(name)  # kopf posts Events in the background


def _name() -> str:
    return f"op-{uuid.uuid4().hex[:8]}"


async def _until_reason(kube: Kube, name: str, reason: str, timeout_s: float = 30) -> dict[str, Any]:
    async def reached() -> dict[str, Any] | None:
        condition = await kube.ready(name)
        return condition if condition and condition["reason"] == reason else None

    return await wait_until(reached, timeout_s=timeout_s, what=f"{name}: Ready reason {reason}")


@pytest.mark.usefixtures("operator_process")
async def test_a_topic_applied_is_created_changed_and_deleted(kube: Kube, admin: AdminClient) -> None:
    name = _name()
    await kube.apply(name, {"partitions": 3, "replicas": 2, "config": {"retention.ms": 3_600_000}})
    ready = await _until_reason(kube, name, "Reconciled")
    assert ready["status"] == "True"
    described = (await admin.describe_topics([name]))[name]
    assert not isinstance(described, Exception)
    assert len(described.partitions) == 3 and described.configs == {"retention.ms": "3600000"}
    await wait_until(lambda: _has_event(kube, name, ("Normal", "Created")), what="a Created event")
    found = await kube.get(name)
    assert found is not None and found["status"]["partitions"] == 3
    assert "tidelog.io/finalizer" in found["metadata"].get("finalizers", []), found["metadata"]

    await kube.patch_spec(name, {"partitions": 4, "config": {"retention.ms": 60_000}})

    async def grown() -> bool:
        topic = (await admin.describe_topics([name]))[name]
        return (
            not isinstance(topic, Exception) and len(topic.partitions) == 4 and topic.configs["retention.ms"] == "60000"
        )

    await wait_until(grown, what="the spec change to reach the cluster")

    await kube.delete(name)

    async def gone() -> bool:
        return await kube.get(name) is None and isinstance((await admin.describe_topics([name]))[name], Exception)

    await wait_until(gone, what="the topic and then the resource to go")


@pytest.mark.usefixtures("operator_process")
async def test_drift_is_put_back_and_bad_specs_are_conditions(kube: Kube, admin: AdminClient) -> None:
    name = _name()
    await kube.apply(name, {"partitions": 1, "replicas": 1, "config": {"retention.ms": "60000"}})
    await _until_reason(kube, name, "Reconciled")
    await admin.alter_configs(name, {"retention.ms": "1"})  # someone changed it outside Kubernetes

    async def reverted() -> bool:
        topic = (await admin.describe_topics([name]))[name]
        return not isinstance(topic, Exception) and topic.configs == {"retention.ms": "60000"}

    await wait_until(reverted, what="the drift to be put back")
    await wait_until(lambda: _has_event(kube, name, ("Warning", "DriftReverted")), what="a DriftReverted event")

    smaller = _name()
    await kube.apply(smaller, {"partitions": 2, "replicas": 1})
    await _until_reason(kube, smaller, "Reconciled")
    await kube.patch_spec(smaller, {"partitions": 1})
    refused = await _until_reason(kube, smaller, "NotSupported")
    assert refused["status"] == "False" and "cannot decrease" in refused["message"]

    invalid = _name()
    await kube.apply(invalid, {"partitions": 1, "replicas": 1, "config": {"segment.bytes": 10}})
    condition = await _until_reason(kube, invalid, "InvalidConfig")
    assert "segment.bytes" in condition["message"]
    await wait_until(lambda: _has_event(kube, invalid, ("Warning", "InvalidConfig")), what="an InvalidConfig event")

    twin = _name()
    await kube.apply(twin, {"partitions": 9, "replicas": 1, "topicName": name})  # names a managed topic
    conflict = await _until_reason(kube, twin, "ResourceConflict")
    assert name in conflict["message"] or "managed by" in conflict["message"]
    topic = (await admin.describe_topics([name]))[name]
    assert not isinstance(topic, Exception) and len(topic.partitions) == 1  # untouched


def _reconciled(log_path: Path, name: str) -> bool:
    return f'"resource": "default/{name}"' in log_path.read_text()


async def test_of_two_replicas_one_acts_and_the_other_takes_over_when_it_stops(
    kubernetes: tuple[str, Path], kube: Kube, cluster: LocalCluster, tmp_path: Path
) -> None:
    url, kubeconfig = kubernetes
    peering = {"apiVersion": "kopf.dev/v1", "kind": "ClusterKopfPeering", "metadata": {"name": "tidelog"}}
    async with kube.session.post(f"{url}/apis/kopf.dev/v1/clusterkopfpeerings", json=peering) as answer:
        assert answer.status in (200, 201), await answer.text()
    logs = {priority: tmp_path / f"operator-{priority}.log" for priority in (200, 100)}
    active = _start_operator(kubeconfig, cluster, logs[200], "--priority", "200")
    standby = _start_operator(kubeconfig, cluster, logs[100], "--priority", "100")
    try:
        first = _name()
        await kube.apply(first, {"partitions": 1, "replicas": 1})
        await _until_reason(kube, first, "Reconciled")
        assert _reconciled(logs[200], first)
        assert not _reconciled(logs[100], first), "the standby acted while the active replica ran"

        # A graceful stop removes its peering entry (the standby resumes) and ends the process.
        assert await _stop_operator(*active) == 0
        second = _name()
        await kube.apply(second, {"partitions": 1, "replicas": 1})
        await _until_reason(kube, second, "Reconciled", timeout_s=60)
        assert _reconciled(logs[100], second)
    finally:
        await _stop_operator(*active)
        await _stop_operator(*standby)


async def test_an_operator_killed_mid_reconcile_and_restarted_does_nothing_twice(
    kubernetes: tuple[str, Path], kube: Kube, cluster: LocalCluster, admin: AdminClient, tmp_path: Path
) -> None:
    """kill -9 as soon as the topic exists (its status, events and kopf's progress possibly unwritten);
    records written meanwhile survive the restart, so the topic was adopted, not created again."""
    _, kubeconfig = kubernetes
    first = _start_operator(kubeconfig, cluster, tmp_path / "operator-1.log", "--standalone")
    name = _name()
    try:
        await kube.apply(name, {"partitions": 2, "replicas": 1, "config": {"retention.ms": 3_600_000}})

        async def exists() -> bool:
            return not isinstance((await admin.describe_topics([name]))[name], Exception)

        await wait_until(exists, what="the topic to be created")
        first[0].kill()  # mid-reconcile: no graceful stop, whatever kopf had not written is lost
    finally:
        await _stop_operator(*first)
    async with Producer(cluster.bootstrap, acks="all") as producer:
        delivered = await (await producer.send(name, b"written while no operator ran", partition=0))
    second = _start_operator(kubeconfig, cluster, tmp_path / "operator-2.log", "--standalone")
    try:
        ready = await _until_reason(kube, name, "Reconciled")
        assert ready["status"] == "True"
        async with Consumer(cluster.bootstrap) as consumer:
            ends = await consumer.list_offsets([TopicPartition(name, 0)], -1)
        assert ends[TopicPartition(name, 0)] == delivered.offset + 1  # the record is still there
        described = (await admin.describe_topics([name]))[name]
        assert not isinstance(described, Exception)
        assert len(described.partitions) == 2 and described.configs == {"retention.ms": "3600000"}
        created = [event for event in await kube.events(name) if event == ("Normal", "Created")]
        assert len(created) <= 1, created  # the second operator found it existing: nothing created twice
    finally:
        await _stop_operator(*second)


def test_retries_back_off_only_while_the_cluster_does_not_answer() -> None:
    settings = OperatorSettings.from_configs(
        {"operator.retry.backoff.ms": "1000", "operator.retry.backoff.max.ms": "5000"}
    )
    unreachable = Outcome(False, "ClusterUnavailable", "no answer", retry_after_s=5.0)
    assert [retry_delay(unreachable, retry, settings) for retry in range(5)] == [1.0, 2.0, 4.0, 5.0, 5.0]
    assert retry_delay(unreachable, 10_000, settings) == 5.0  # no overflow after a long outage
    creating = Outcome(False, "Creating", "leaders not elected yet", retry_after_s=2.0)
    assert retry_delay(creating, 7, settings) == 2.0  # progress is looked at on its own pace


def test_every_handler_asks_kopf_again_one_way() -> None:
    memo = OperatorMemo(OperatorSettings.from_configs(), None, None, None)  # type: ignore[arg-type]
    _retry_unless_done(Outcome(True, "Ready", "done"), 3, memo)  # ready: nothing to run again
    _retry_unless_done(Outcome(False, "InvalidSpec", "bad spec"), 3, memo)  # no pace: wait for a spec change
    with pytest.raises(kopf.TemporaryError) as creating:
        _retry_unless_done(Outcome(False, "Creating", "not yet", retry_after_s=2.0), 3, memo)
    assert creating.value.delay == 2.0
    with pytest.raises(kopf.TemporaryError) as deleting:
        _retry_unless_done(Outcome(False, "InUse", "members left"), 0, memo, deleting=True)
    assert deleting.value.delay == DELETE_RETRY_S  # a deletion not done is always tried again


async def test_a_cluster_that_stops_answering_is_a_condition_and_the_topic_follows_once_it_is_back(
    kubernetes: tuple[str, Path], kube: Kube, cluster: LocalCluster, admin: AdminClient, tmp_path: Path
) -> None:
    """Every controller frozen (SIGSTOP): topics cannot be created. The operator neither crashes nor
    gives up: the resource says ClusterUnavailable, and once the controllers run again it is created."""
    _, kubeconfig = kubernetes
    controllers = sorted(name for name in cluster.processes if name.startswith("controller"))
    operator = _start_operator(
        kubeconfig,
        cluster,
        tmp_path / "operator.log",
        "--standalone",
        "--config",
        "operator.request.timeout.ms=1000",
        "--config",
        "operator.retry.backoff.ms=500",
        "--config",
        "operator.retry.backoff.max.ms=2000",
    )
    name = _name()
    try:
        for controller in controllers:
            cluster.signal(controller, signal.SIGSTOP)
        try:
            await kube.apply(name, {"partitions": 1, "replicas": 1})
            condition = await _until_reason(kube, name, "ClusterUnavailable")
            assert condition["status"] == "False" and condition["message"]
            assert operator[0].poll() is None  # no crash
        finally:
            for controller in controllers:
                cluster.signal(controller, signal.SIGCONT)
        ready = await _until_reason(kube, name, "Reconciled", timeout_s=60)
        assert ready["status"] == "True"
        assert not isinstance((await admin.describe_topics([name]))[name], Exception)
    finally:
        await _stop_operator(*operator)


GROUPS_API = "/apis/tidelog.io/v1beta1/namespaces/default/consumergroups"


async def test_a_consumer_group_shows_its_members_and_lag_and_a_reset_waits_for_them_to_leave(
    kubernetes: tuple[str, Path], kube: Kube, tmp_path: Path
) -> None:
    """ConsumerGroup through the kopf process: status from the coordinators with a real member, an
    offset reset that waits while the member is in the group and applies once it leaves, and a
    deleted resource that deletes the group's committed offsets."""
    _, kubeconfig = kubernetes
    async with started_cluster(tmp_path / "cluster", coordinators=1, coordinator_args=COORDINATOR_ARGS) as cluster:
        async with AdminClient(cluster.bootstrap, controllers=cluster.controller_endpoints) as admin:
            await admin.create_topic("events", 2, 1)
        async with Producer(cluster.bootstrap) as producer:
            await (await producer.send_batch("events", [b"%03d" % n for n in range(100)], partition=0))
        member = GroupConsumer(cluster.bootstrap, "billing", auto_offset_reset="earliest", enable_auto_commit=False)
        member.subscribe(["events"])
        await poll_until(member, 40, what="some records read")
        await member.commit({TopicPartition("events", 0): 40})

        operator = _start_operator(kubeconfig, cluster, tmp_path / "operator.log", "--standalone")
        try:
            body = {
                "apiVersion": "tidelog.io/v1beta1",
                "kind": "ConsumerGroup",
                "metadata": {"name": "billing", "namespace": "default"},
                "spec": {"resetOffsets": {"id": "replay-1", "to": "earliest", "topics": ["events"]}},
            }
            async with kube.session.post(f"{kube.url}{GROUPS_API}", json=body) as answer:
                assert answer.status in (200, 201), await answer.text()

            async def status(reason: str) -> dict[str, Any] | None:
                async with kube.session.get(f"{kube.url}{GROUPS_API}/billing") as answer:
                    found = (await answer.json()).get("status") or {}
                ready = next((c for c in found.get("conditions") or [] if c["type"] == "Ready"), None)
                return found if ready and ready["reason"] == reason else None

            # Polled while waiting, so the member stays in the group (its session does not lapse).
            async def waiting() -> dict[str, Any] | None:
                await member.poll(50)
                return await status("ResetWaiting")

            found = await wait_until(waiting, what="the reset to wait for the member")
            assert found["state"] == "Stable" and found["memberCount"] == 1
            assert sorted(found["members"][0]["partitions"]) == ["events-0", "events-1"]
            assert found["lagByTopic"]["events"] == 60 and "lastReset" not in found

            await member.close()  # leaves the group: the reset may go now
            applied = await wait_until(lambda: status("Reconciled"), what="the reset to be applied")
            assert applied["lastReset"] == "replay-1" and applied["totalLag"] == 100
            await wait_until(
                lambda: _has_event(kube, "billing", ("Normal", "OffsetsReset")), what="an OffsetsReset event"
            )

            async with kube.session.delete(f"{kube.url}{GROUPS_API}/billing") as answer:
                assert answer.status in (200, 202), await answer.text()
            async with GroupAdmin(cluster.bootstrap) as groups:

                async def deleted() -> bool:
                    async with kube.session.get(f"{kube.url}{GROUPS_API}/billing") as answer:
                        if answer.status != 404:
                            return False
                    return all(lag.committed is None for lag in (await groups.describe_group("billing")).partitions)

                await wait_until(deleted, what="the resource and the group's offsets to go")
        finally:
            await _stop_operator(*operator)
