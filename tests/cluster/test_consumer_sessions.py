"""A consumer's incremental fetch sessions (KIP-227) against real brokers: idle partitions cost a
fetch nothing, news on any one of them wakes the long poll, a seek or a pause is listed, and a
session a broker lost (restarted) is opened again without a record lost or read twice."""

from __future__ import annotations

import signal
import time

from tests.cluster.conftest import poll_until, wait_until
from tidelog.client import AdminClient, Consumer, Producer, TopicPartition
from tidelog.dev.local_cluster import LocalCluster

PARTITIONS = 12


async def _send(producer: Producer, topic: str, partition: int, values: list[bytes]) -> None:
    await (await producer.send_batch(topic, values, partition=partition))


async def test_a_session_carries_an_idle_consumer_and_wakes_on_news(
    admin: AdminClient, cluster: LocalCluster, topic_name: str
) -> None:
    await admin.create_topic(topic_name, PARTITIONS, 2)
    tps = [TopicPartition(topic_name, p) for p in range(PARTITIONS)]
    async with (
        Producer(cluster.bootstrap, acks="all") as producer,
        Consumer(cluster.bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=3000) as consumer,
    ):
        for partition in range(PARTITIONS):
            await _send(producer, topic_name, partition, [b"%d-0" % partition, b"%d-1" % partition])
        consumer.assign(tps)
        first = await poll_until(consumer, 2 * PARTITIONS)
        assert sorted(record.value for record in first) == sorted(
            b"%d-%d" % (p, n) for p in range(PARTITIONS) for n in range(2)
        )
        # Idle: once each partition is listed at its position (after records, at the next fetch),
        # a fetch lists nothing and long-polls on the session; one record on one partition
        # answers it well before fetch.max.wait.ms.
        assert not await consumer.poll(3500)  # the fetch listing them all is answered (empty) at 3 s
        sessions = [session for session in consumer._sessions.values() if session.session_id]
        assert sessions and sum(len(session.held) for session in sessions) == PARTITIONS
        assert not any(
            session.changes({tp: consumer._positions[tp] for tp in session.held})[0] for session in sessions
        ), "nothing to list while idle"
        await _send(producer, topic_name, 7, [b"late"])
        asked = time.monotonic()
        late = await poll_until(consumer, 1)
        assert [(record.partition, record.value) for record in late] == [(7, b"late")]
        assert time.monotonic() - asked < 1.5
        # A seek is a changed offset: listed, and read from there.
        consumer.seek(TopicPartition(topic_name, 3), 1)
        assert [record.value for record in await poll_until(consumer, 1)] == [b"3-1"]
        # A paused partition is dropped from the session, and listed again once resumed.
        consumer.pause([TopicPartition(topic_name, 5)])
        await _send(producer, topic_name, 5, [b"while-paused"])
        await _send(producer, topic_name, 6, [b"other"])
        assert [record.value for record in await poll_until(consumer, 1)] == [b"other"]
        consumer.resume([TopicPartition(topic_name, 5)])
        assert [record.value for record in await poll_until(consumer, 1)] == [b"while-paused"]


async def test_a_session_the_broker_lost_is_opened_again_and_nothing_is_missed(fresh_cluster: LocalCluster) -> None:
    cluster = fresh_cluster
    topic = "sessions-restart"
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    seen: list[bytes] = []
    async with (
        AdminClient(cluster.bootstrap, controllers=cluster.controller_endpoints) as admin,
        Producer(cluster.bootstrap, acks="all") as producer,
        Consumer(cluster.bootstrap, auto_offset_reset="earliest") as consumer,
    ):
        await admin.create_topic(topic, PARTITIONS, 3)

        async def led_by_all() -> bool:
            described = (await admin.describe_topics([topic]))[topic]
            return not isinstance(described, Exception) and all(p.leader > 0 for p in described.partitions)

        consumer.assign(tps)
        for round_ in range(3):
            for partition in range(PARTITIONS):
                await _send(producer, topic, partition, [b"%d-%d" % (round_, partition)])
            seen += [record.value for record in await poll_until(consumer, PARTITIONS)]
            if round_ == 0:
                cluster.restart("broker-2", signal.SIGKILL)  # its sessions die with it
                await cluster.wait_ready()
                await wait_until(led_by_all, what="every partition led")
    assert sorted(seen) == sorted(b"%d-%d" % (r, p) for r in range(3) for p in range(PARTITIONS))
