"""Kafka-named metrics scraped from a real cluster's processes: cluster state from the active
controller only, partition offsets from each partition's leader only, so that summing a scrape of
every process counts everything once (docs/metrics.md)."""

from __future__ import annotations

import asyncio
import urllib.request
from collections.abc import AsyncIterator, Iterable
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from tests.cluster.conftest import COORDINATOR_ARGS, poll_until, started_cluster, wait_until
from tidelog.client import AdminClient, Consumer, GroupConsumer, Producer, TopicPartition
from tidelog.dev.local_cluster import LocalCluster

EXPORTER_ARGS = ["--controller-metrics-exporter-refresh-ms", "500"]  # the kafka_exporter view, refreshed often
RECORDS = 50


def _scrape(url: str) -> list[Sample]:
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    return [sample for family in text_string_to_metric_families(text) for sample in family.samples]


async def _scrape_all(cluster: LocalCluster, prefix: str) -> dict[str, list[Sample]]:
    names = sorted(name for name in cluster.processes if name.startswith(prefix))
    scraped = await asyncio.gather(*(asyncio.to_thread(_scrape, cluster.metrics_endpoint(n)) for n in names))
    return dict(zip(names, scraped, strict=True))


def _values(samples: Iterable[Sample], name: str, **labels: str) -> list[float]:
    return [
        sample.value
        for sample in samples
        if sample.name == name and all(sample.labels.get(key) == value for key, value in labels.items())
    ]


async def test_cluster_topic_and_partition_figures_come_from_one_process_each(
    cluster: LocalCluster, admin: AdminClient, topic_name: str
) -> None:
    await admin.create_topic(topic_name, 3, 3)
    async with Producer(cluster.bootstrap, acks="all") as producer:
        await (await producer.send_batch(topic_name, [b"r%d" % n for n in range(RECORDS)], partition=0))
    async with Consumer(cluster.bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic_name, 0)])
        await poll_until(consumer, RECORDS, what="the records read back")
    described = (await admin.describe_topics([topic_name]))[topic_name]
    assert not isinstance(described, Exception)
    leader_of = {state.partition: state.leader for state in described.partitions}

    async def in_sync_everywhere() -> dict[str, list[Sample]] | None:
        controllers = await _scrape_all(cluster, "controller")
        isr = [
            v
            for s in controllers.values()
            for v in _values(s, "kafka_topic_partition_in_sync_replica", topic=topic_name)
        ]
        offsets = [
            v
            for s in controllers.values()
            for v in _values(s, "kafka_topic_partition_current_offset", topic=topic_name, partition="0")
        ]
        return controllers if sorted(isr) == [3, 3, 3] and offsets == [RECORDS] else None

    controllers = await wait_until(
        in_sync_everywhere, what="every partition in sync and the offsets (refreshed by the active controller)"
    )
    active = [
        name
        for name, s in controllers.items()
        if _values(s, "kafka_controller_kafkacontroller_activecontrollercount") == [1]
    ]
    assert len(active) == 1
    assert (
        sum(
            v
            for s in controllers.values()
            for v in _values(s, "kafka_controller_kafkacontroller_activecontrollercount")
        )
        == 1
    )
    samples = controllers[active[0]]
    for standby in set(controllers) - set(active):  # standbys hold no cluster state: nothing to double-count
        assert _values(controllers[standby], "kafka_brokers") == []
    assert _values(samples, "kafka_brokers") == [3]
    assert len(_values(samples, "kafka_broker_info")) == 3
    assert _values(samples, "kafka_topic_partitions", topic=topic_name) == [3]
    for partition in range(3):
        labels = {"topic": topic_name, "partition": str(partition)}
        assert _values(samples, "kafka_topic_partition_leader", **labels) == [leader_of[partition]]
        assert _values(samples, "kafka_topic_partition_replicas", **labels) == [3]
        assert _values(samples, "kafka_topic_partition_under_replicated_partition", **labels) == [0]
    assert _values(samples, "kafka_controller_kafkacontroller_offlinepartitionscount") == [0]

    # kafka_exporter's whole family from one target, the active controller (as kafka_exporter):
    # the offsets too, asked of the leaders; no broker exports them, so nothing counts twice.
    assert _values(samples, "kafka_topic_partition_current_offset", topic=topic_name, partition="0") == [RECORDS]
    assert _values(samples, "kafka_topic_partition_oldest_offset", topic=topic_name, partition="0") == [0]
    brokers = await _scrape_all(cluster, "broker")
    everything = [sample for scraped in brokers.values() for sample in scraped]
    assert _values(everything, "kafka_topic_partition_current_offset", topic=topic_name) == []
    leader_samples = brokers[f"broker-{leader_of[0]}"]
    assert _values(leader_samples, "kafka_cluster_partition_replicascount", topic=topic_name, partition="0") == [3]
    assert _values(everything, "kafka_cluster_partition_replicascount", topic=topic_name, partition="0") == [3]
    assert _values(leader_samples, "kafka_cluster_partition_atminisr", topic=topic_name, partition="0") == [0]
    assert sum(_values(everything, "kafka_server_brokertopicmetrics_messagesin_total", topic=topic_name)) == RECORDS
    assert sum(_values(everything, "kafka_server_brokertopicmetrics_bytesin_total", topic=topic_name)) > 0
    assert sum(_values(everything, "kafka_server_brokertopicmetrics_bytesout_total", topic=topic_name)) > 0
    # Every replica's log has a size on its broker: 3 partitions × 3 replicas, the leaders' with data.
    sizes = _values(everything, "kafka_log_log_size", topic=topic_name)
    assert len(sizes) == 9 and sum(size > 0 for size in sizes) == 3
    assert (
        sum(_values(leader_samples, "kafka_network_requestmetrics_requests_total", request="Produce", error="NONE"))
        >= 1
    )
    assert sum(_values(everything, "kafka_network_requestmetrics_totaltimems_count", request="FetchFollower")) >= 1
    assert sum(_values(everything, "kafka_network_requestmetrics_requestqueuetimems_count", request="Produce")) >= 1
    assert sum(_values(everything, "kafka_server_replicamanager_underreplicatedpartitions")) == 0
    assert sum(_values(everything, "kafka_server_replicamanager_leadercount")) >= 3


@pytest.fixture
async def exporting_cluster(tmp_path: Path) -> AsyncIterator[LocalCluster]:
    """Two coordinators, and the active controller's kafka_exporter view refreshed every 500 ms."""
    async with started_cluster(
        tmp_path / "cluster",
        coordinators=2,
        coordinator_args=COORDINATOR_ARGS,
        controller_args=EXPORTER_ARGS,
        metrics=True,
    ) as cluster:
        yield cluster


async def _written(cluster: LocalCluster, topic: str, partitions: int, records: int) -> None:
    """A topic of `partitions` partitions (RF 1) with `records` records in partition 0."""
    async with AdminClient(cluster.bootstrap, controllers=cluster.controller_endpoints) as admin:
        await admin.create_topic(topic, partitions, 1)
    async with Producer(cluster.bootstrap) as producer:
        await (await producer.send_batch(topic, [b"%03d" % n for n in range(records)], partition=0))


async def test_group_offsets_lag_and_members_come_from_the_active_controller(exporting_cluster: LocalCluster) -> None:
    cluster = exporting_cluster
    await _written(cluster, "events", 2, 100)
    member = GroupConsumer(cluster.bootstrap, "billing", auto_offset_reset="earliest", enable_auto_commit=False)
    member.subscribe(["events"])
    try:
        await poll_until(member, 40, what="some records read")
        await member.commit({TopicPartition("events", 0): 40})

        async def lag_reported() -> list[Sample] | None:
            await member.poll(20)  # stays in the group
            scraped = await _scrape_all(cluster, "controller")
            everything = [sample for samples in scraped.values() for sample in samples]
            lag = _values(everything, "kafka_consumergroup_lag", consumergroup="billing", topic="events")
            return everything if sorted(lag) == [-1, 60] else None

        everything = await wait_until(lag_reported, what="the group's lag in the active controller's metrics")
        labels = {"consumergroup": "billing", "topic": "events"}
        # The active controller alone exports them: one series each over both controllers.
        assert _values(everything, "kafka_consumergroup_current_offset", **labels, partition="0") == [40]
        # Never committed: -1, as kafka_exporter, and kept out of the sums.
        assert _values(everything, "kafka_consumergroup_current_offset", **labels, partition="1") == [-1]
        assert _values(everything, "kafka_consumergroup_lag", **labels, partition="1") == [-1]
        assert _values(everything, "kafka_consumergroup_lag_sum", **labels) == [60]
        assert _values(everything, "kafka_consumergroup_current_offset_sum", **labels) == [40]
        assert _values(everything, "kafka_consumergroup_members", consumergroup="billing") == [1]
    finally:
        await member.close()


async def test_the_exporter_view_asks_the_leaders_only_while_it_is_scraped(exporting_cluster: LocalCluster) -> None:
    """ADR 0033: the view's offsets round (ListOffsets to every leader) runs for its scrapes, not
    every refresh.ms of a cluster nobody scrapes (a third of an idle broker's CPU at 10,000)."""
    cluster = exporting_cluster
    await _written(cluster, "events", 2, 10)

    async def offsets_exported() -> bool:
        scraped = await _scrape_all(cluster, "controller")
        everything = [sample for samples in scraped.values() for sample in samples]
        return _values(everything, "kafka_topic_partition_current_offset", topic="events", partition="0") == [10]

    async def list_offsets_served() -> float:
        scraped = await _scrape_all(cluster, "broker")  # (the brokers' scrapes pace nothing)
        everything = [sample for samples in scraped.values() for sample in samples]
        return sum(_values(everything, "kafka_network_requestmetrics_requests_total", request="ListOffsets"))

    await wait_until(offsets_exported, what="the written offsets in the active controller's view")
    # Unscraped from here: the refresh the last scrape was due (at the next 500 ms tick) is over
    # well within 2.5 s, on a loaded machine too.
    await asyncio.sleep(2.5)
    before = await list_offsets_served()
    await asyncio.sleep(2.0)  # four ticks with no scrape: an absence takes its window to show
    assert await list_offsets_served() == before, "the view asked the leaders while nobody scraped it"
    await _scrape_all(cluster, "controller")  # one scrape: the next tick refreshes for it

    async def asked_again() -> bool:
        return await list_offsets_served() > before

    await wait_until(asked_again, timeout_s=10, what="a refresh after the scrape")


async def test_a_dead_consumers_lag_is_end_minus_committed_on_every_partition(exporting_cluster: LocalCluster) -> None:
    """Issue 32: a group whose consumer died showed about half its backlog — its consumer had
    committed only the partitions it had received records from. Now it commits its position on
    every assigned partition (Kafka's allConsumed), and the exporter has a series for each."""
    cluster = exporting_cluster
    await _written(cluster, "orders", 4, 30)
    member = GroupConsumer(cluster.bootstrap, "shipping", auto_offset_reset="earliest", enable_auto_commit=False)
    member.subscribe(["orders"])
    await poll_until(member, 30, what="partition 0 read")
    assert len(member.assignment()) == 4
    await member.commit()  # records came from partition 0 only; every position is committed
    partitions = [TopicPartition("orders", p) for p in range(4)]
    committed = await member.committed(partitions)
    assert committed == {partitions[0]: 30, partitions[1]: 0, partitions[2]: 0, partitions[3]: 0}
    # It dies (no LeaveGroup, no more commits) while the producers go on.
    assert member._heartbeat_task is not None
    member._heartbeat_task.cancel()
    member.membership.close()
    async with Producer(cluster.bootstrap) as producer:
        for partition in range(4):
            await (await producer.send_batch("orders", [b"x"] * (100 + partition), partition=partition))
    expected = {"0": 100, "1": 101, "2": 102, "3": 103}  # end minus committed, every partition

    async def backlog() -> dict[str, float] | None:
        scraped = await _scrape_all(cluster, "controller")
        everything = [sample for samples in scraped.values() for sample in samples]
        found = {
            sample.labels["partition"]: sample.value
            for sample in everything
            if sample.name == "kafka_consumergroup_lag" and sample.labels.get("consumergroup") == "shipping"
        }
        return found if found == expected else None

    await wait_until(backlog, timeout_s=30, what="the dead group's lag on every partition")
    await member.consumer.close()
    await member.connections.close()


async def test_per_partition_series_stop_at_the_configured_limit(tmp_path: Path) -> None:
    async with started_cluster(
        tmp_path / "cluster",
        brokers=1,
        controllers=1,
        metrics=True,
        broker_args=["--metrics-partition-series-max", "2"],
        controller_args=["--controller-metrics-partition-series-max", "3"],
    ) as cluster:
        async with AdminClient(cluster.bootstrap, controllers=cluster.controller_endpoints) as admin:
            await admin.create_topic("wide", 5, 1)
        async with Producer(cluster.bootstrap) as producer:
            for partition in range(5):
                await (await producer.send("wide", b"x" * 100, partition=partition))

        async def sizes_seen() -> list[Sample] | None:
            scraped = (await _scrape_all(cluster, "broker"))["broker-1"]
            return scraped if _values(scraped, "kafka_cluster_partition_replicascount", topic="wide") else None

        broker = await wait_until(sizes_seen, what="the broker's partition series")
        sizes = {s.labels["partition"]: s.value for s in broker if s.name == "kafka_log_log_size"}
        assert set(sizes) == {"0", "1", "all"}  # two partitions, then the rest summed per topic
        assert sizes["all"] > 0
        assert len(_values(broker, "kafka_cluster_partition_replicascount", topic="wide")) == 2
        assert _values(broker, "kafka_server_replicamanager_partitioncount") == [5]  # totals stay whole

        controller = (await _scrape_all(cluster, "controller"))["controller-1"]
        assert len(_values(controller, "kafka_topic_partition_leader", topic="wide")) == 3
        assert _values(controller, "kafka_topic_partitions", topic="wide") == [5]
        assert _values(controller, "kafka_controller_kafkacontroller_globalpartitioncount") == [5]
