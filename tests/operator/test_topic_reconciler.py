"""The Topic reconciler against a real local cluster (etcd, 2 controllers, 3 brokers): each spec
change reaches the cluster through the client, and what it cannot do is refused, untouched."""

from __future__ import annotations

from typing import Any

from tests.cluster.conftest import wait_until
from tidelog.client import AdminClient
from tidelog.client.admin import TopicDescription
from tidelog.dev.local_cluster import LocalCluster
from tidelog.operator.topic_reconciler import Outcome, TopicReconciler, TopicSpec


def _spec(name: str, **spec: Any) -> TopicSpec:
    return TopicSpec.from_resource(name, {"partitions": 3, "replicas": 1, **spec})


async def _described(admin: AdminClient, topic: str) -> TopicDescription:
    found = (await admin.describe_topics([topic]))[topic]
    assert isinstance(found, TopicDescription), found
    return found


async def _until_ready(reconciler: TopicReconciler, spec: TopicSpec) -> Outcome:
    outcomes: list[Outcome] = []

    async def ready() -> bool:
        outcomes.append(await reconciler.reconcile(spec))
        return outcomes[-1].ready

    try:
        await wait_until(ready, timeout_s=30, what=f"{spec.topic_name} Ready")
    except AssertionError as error:
        raise AssertionError(f"{error}; the last outcome: {outcomes[-1] if outcomes else None}") from error
    return outcomes[-1]


async def test_a_topic_is_created_then_changed_as_its_spec_changes(admin: AdminClient, topic_name: str) -> None:
    reconciler = TopicReconciler(admin)
    created = await _until_ready(reconciler, _spec(topic_name, config={"retention.ms": 3_600_000}))
    assert created.status["partitions"] == 3 and created.reason == "Reconciled"
    described = await _described(admin, topic_name)
    assert (len(described.partitions), described.configs) == (3, {"retention.ms": "3600000"})
    # More partitions, a config changed, one added (a boolean as YAML gives it), one dropped.
    spec = _spec(
        topic_name, partitions=5, config={"cleanup.policy": "compact", "unclean.leader.election.enable": False}
    )
    changed = await _until_ready(reconciler, spec)
    described = await _described(admin, topic_name)
    assert len(described.partitions) == 5
    assert described.configs == {"cleanup.policy": "compact", "unclean.leader.election.enable": "false"}
    assert {reason for _, reason, _ in changed.events} <= {"PartitionsAdded", "ConfigChanged"}
    again = await reconciler.reconcile(spec)
    assert again.ready and again.events == []  # idempotent: nothing more to do


async def test_a_decrease_is_refused_and_nothing_changes(admin: AdminClient, topic_name: str) -> None:
    reconciler = TopicReconciler(admin)
    await _until_ready(reconciler, _spec(topic_name, partitions=4))
    refused = await reconciler.reconcile(_spec(topic_name, partitions=2, config={"retention.ms": 1000}))
    assert (refused.ready, refused.reason) == (False, "NotSupported")
    described = await _described(admin, topic_name)
    assert (len(described.partitions), described.configs) == (4, {})


async def test_an_invalid_config_is_reported_with_the_controllers_message(admin: AdminClient, topic_name: str) -> None:
    outcome = await TopicReconciler(admin).reconcile(_spec(topic_name, config={"segment.bytes": 1}))
    assert (outcome.ready, outcome.reason) == (False, "InvalidConfig")
    assert "segment.bytes" in outcome.message and "minimum" in outcome.message
    assert outcome.events[-1][:2] == ("Warning", "InvalidConfig")
    assert isinstance((await admin.describe_topics([topic_name]))[topic_name], Exception)  # nothing created


async def test_an_existing_topic_is_adopted_and_drift_is_put_back(admin: AdminClient, topic_name: str) -> None:
    await admin.create_topic(topic_name, 3, 1, {"retention.ms": "1000"})  # made by someone else first
    reconciler = TopicReconciler(admin)
    spec = _spec(topic_name, config={"retention.ms": "60000"})
    adopted = await _until_ready(reconciler, spec)
    assert ("Normal", "Created") not in [event[:2] for event in adopted.events]
    await admin.alter_configs(topic_name, {"retention.ms": "5", "segment.ms": "10000"})  # a change outside
    reverted = await reconciler.reconcile(spec, drift=True)
    assert [event[:2] for event in reverted.events] == [("Warning", "DriftReverted")]
    assert (await _described(admin, topic_name)).configs == {"retention.ms": "60000"}


async def test_more_replicas_are_reassigned_and_ready_once_in_sync(admin: AdminClient, topic_name: str) -> None:
    reconciler = TopicReconciler(admin)
    await _until_ready(reconciler, _spec(topic_name, partitions=2, replicas=1))
    grown = _spec(topic_name, partitions=2, replicas=3)
    first = await reconciler.reconcile(grown)
    assert first.reason in ("Reassigning", "Reconciled")
    done = await _until_ready(reconciler, grown)
    assert done.status["replicas"] == 3 and done.status["underReplicatedPartitions"] == 0
    for state in (await _described(admin, topic_name)).partitions:
        assert sorted(state.replicas) == [1, 2, 3] and sorted(state.isr) == [1, 2, 3]
    pinned = _spec(topic_name, partitions=2, replicas=2, assignment=[[3, 1], [2, 3]])
    await _until_ready(reconciler, pinned)
    assert [list(state.replicas) for state in (await _described(admin, topic_name)).partitions] == [[3, 1], [2, 3]]


async def test_deletion_deletes_or_retains(admin: AdminClient, topic_name: str) -> None:
    reconciler = TopicReconciler(admin)
    kept = _spec(topic_name, deletionPolicy="Retain")
    await _until_ready(reconciler, kept)
    assert (await reconciler.delete(kept)).reason == "Retained"
    await _described(admin, topic_name)  # still there
    gone = await reconciler.delete(_spec(topic_name))
    assert (gone.ready, gone.reason) == (True, "Deleted")
    assert isinstance((await admin.describe_topics([topic_name]))[topic_name], Exception)
    assert (await reconciler.delete(_spec(topic_name))).ready  # deleting what is gone is done


async def test_an_unreachable_cluster_is_a_condition_not_a_crash(cluster: LocalCluster) -> None:
    async with AdminClient(["127.0.0.1:9"], request_timeout_ms=500) as nowhere:
        outcome = await TopicReconciler(nowhere).reconcile(_spec("anything"))
    assert (outcome.ready, outcome.reason) == (False, "ClusterUnavailable")
    assert outcome.retry_after_s is not None
