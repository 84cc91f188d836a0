"""Failures with real processes: the controller dies, a broker dies or restarts, leaders move."""

from __future__ import annotations

import asyncio
import functools
import signal
import uuid
from pathlib import Path

import grpc
from etcd3aio import Etcd3Client, prefix_range_end

from tidelog.broker.clean_shutdown import CleanShutdown
from tidelog.client import AdminClient, Consumer, Producer, TopicPartition
from tidelog.common.errors import ErrorCode
from tidelog.dev.local_cluster import LocalCluster
from tidelog.server_common.metadata import TOPICS_PREFIX, PartitionStateRecord, parse_topics_key
from tidelog.v1 import broker_pb2, common_pb2

from .conftest import started_cluster, wait_until


async def _active(admin: AdminClient) -> tuple[int, int]:
    cluster = await admin.describe_cluster()
    return cluster.controller_id, cluster.controller_epoch


async def test_controller_failover_and_stale_epoch_fencing(fresh_cluster: LocalCluster) -> None:
    async with AdminClient(fresh_cluster.bootstrap, controllers=fresh_cluster.controller_endpoints) as admin:
        old_id, old_epoch = await _active(admin)
        await admin.create_topic("before", 3, 2)
        fresh_cluster.signal(f"controller-{old_id}", signal.SIGKILL)

        async def new_controller() -> tuple[int, int] | None:
            active = await _active(admin)
            return active if active[0] != old_id else None

        _, new_epoch = await wait_until(new_controller, what="another controller to take over")
        assert new_epoch > old_epoch
        await admin.create_topic("after", 2, 3)  # topic creation still works
        described = await admin.describe_topics(["before", "after"])
        assert all(not isinstance(topic, Exception) for topic in described.values())

        # A request carrying the dead controller's epoch is refused by every broker.
        stale = broker_pb2.LeaderAndIsrRequest(
            controller_id=old_id,
            controller_epoch=old_epoch,
            full=True,
            partitions=[common_pb2.PartitionState(topic="before", partition=0, leader=-1, leader_epoch=99)],
        )
        for endpoint in fresh_cluster.bootstrap:
            refused = await wait_until(
                functools.partial(_refused, admin.connections.broker(endpoint), stale),
                what=f"{endpoint} to learn the new epoch",
            )
            assert refused
        # ... and its leadership is untouched.
        before = (await admin.describe_topics(["before"]))["before"]
        assert not isinstance(before, Exception) and all(state.leader > 0 for state in before.partitions)


async def _refused(broker: object, request: broker_pb2.LeaderAndIsrRequest) -> bool:
    response = await broker.LeaderAndIsr(request, timeout=5)  # type: ignore[attr-defined]
    return bool(response.error_code == ErrorCode.STALE_CONTROLLER_EPOCH)


async def test_broker_restart_keeps_its_data(fresh_cluster: LocalCluster) -> None:
    topic = f"keep-{uuid.uuid4().hex[:6]}"
    values = [b"%05d" % number for number in range(5000)]
    async with AdminClient(fresh_cluster.bootstrap, controllers=fresh_cluster.controller_endpoints) as admin:
        await admin.create_topic(topic, 3, 1)
        async with Producer(fresh_cluster.bootstrap, acks="all") as producer:
            await (await producer.send_batch(topic, values))
        for broker_id in fresh_cluster.broker_ids:  # a clean stop, then a crash, of every broker
            fresh_cluster.signal(f"broker-{broker_id}", signal.SIGTERM if broker_id % 2 else signal.SIGKILL)
            fresh_cluster.start_broker(broker_id)
        await fresh_cluster.wait_ready()

        async def all_led() -> bool:
            described = (await admin.describe_topics([topic]))[topic]
            return not isinstance(described, Exception) and all(state.leader > 0 for state in described.partitions)

        await wait_until(all_led, what="every partition to have a leader again")
    got: list[bytes] = []
    async with Consumer(fresh_cluster.bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, partition) for partition in range(3)])

        async def everything() -> bool:
            got.extend(record.value or b"" for record in await consumer.poll(500))
            return len(got) >= len(values)

        await wait_until(everything, what="all records back")
    assert sorted(got) == values


async def test_a_restarted_broker_serves_no_metadata_until_a_controller_sent_it(fresh_cluster: LocalCluster) -> None:
    """A broker back before any controller told it the cluster's state would answer "no such topic,
    no brokers"; it refuses instead, so a client that asks it first forgets nothing and asks another."""
    topic = "told"
    async with AdminClient(fresh_cluster.bootstrap, controllers=fresh_cluster.controller_endpoints) as admin:
        await admin.create_topic(topic, 3, 3)
    restarted = fresh_cluster.broker_endpoint(1)
    async with Producer(fresh_cluster.bootstrap, acks="all", retry_backoff_ms=50) as producer:
        assert producer.metadata.bootstrap[0] == restarted
        await (await producer.send(topic, b"before", partition=0))
        for controller_id in fresh_cluster.controller_ids:
            fresh_cluster.signal(f"controller-{controller_id}", signal.SIGSTOP)
        try:
            fresh_cluster.signal("broker-1", signal.SIGKILL)
            fresh_cluster.start_broker(1)
            stub = producer.connections.broker(restarted)

            async def refused() -> bool:
                try:
                    await stub.Metadata(broker_pb2.MetadataRequest(topics=[topic]), timeout=1)
                except grpc.aio.AioRpcError as error:
                    return error.code() == grpc.StatusCode.UNAVAILABLE and "no cluster metadata" in (
                        error.details() or ""
                    )
                return False

            await wait_until(refused, what="the restarted broker to refuse Metadata")
            await producer.metadata.refresh([topic])  # broker 1 is asked first, refuses; another answers
            assert len(producer.metadata.partitions[topic]) == 3
            assert len(producer.metadata.brokers) == 3
        finally:
            for controller_id in fresh_cluster.controller_ids:
                fresh_cluster.signal(f"controller-{controller_id}", signal.SIGCONT)
        deliveries = [await producer.send(topic, b"after", partition=partition) for partition in range(3)]
        assert [metadata.offset >= 0 for metadata in [await delivery for delivery in deliveries]] == [True] * 3

    async def served() -> bool:
        answer = await stub.Metadata(broker_pb2.MetadataRequest(topics=[topic]), timeout=1)
        return len(answer.topics[0].partitions) == 3

    async with Producer([restarted]) as told:
        stub = told.connections.broker(restarted)
        await wait_until(served, what="broker 1 to serve metadata once a controller sent it")


async def test_the_client_follows_a_leader_that_moved(fresh_cluster: LocalCluster) -> None:
    topic = "moving"
    async with AdminClient(fresh_cluster.bootstrap, controllers=fresh_cluster.controller_endpoints) as admin:
        await admin.create_topic(topic, 1, 2)
        described = (await admin.describe_topics([topic]))[topic]
        assert not isinstance(described, Exception)
        old_leader = described.partitions[0].leader
        async with Producer(fresh_cluster.bootstrap, acks=1, retry_backoff_ms=50) as producer:
            first = await (await producer.send(topic, b"before", partition=0))
            fresh_cluster.signal(f"broker-{old_leader}", signal.SIGKILL)
            second = await (await producer.send(topic, b"after", partition=0))  # retried until the new leader
        described = (await admin.describe_topics([topic]))[topic]
        assert not isinstance(described, Exception)
        new_state = described.partitions[0]
        assert new_state.leader not in (old_leader, -1)
        assert new_state.leader_epoch == 1
        assert old_leader not in new_state.isr
        assert first.offset == 0
        # With acks=1 "before" may not have reached the follower before the kill: "after" lands at 0 or 1.
        assert second.partition == 0 and second.offset in (0, 1)


async def test_sigterm_stops_each_service_cleanly(fresh_cluster: LocalCluster) -> None:
    # A broker that never hosted a log stops cleanly too (its data directory did not exist, and
    # writing the list of cleanly closed logs raised out of the stop).
    assert fresh_cluster.signal("broker-3", signal.SIGTERM) == 0
    assert CleanShutdown(fresh_cluster.data_dir / "broker-3").take() == 0
    async with AdminClient(fresh_cluster.bootstrap, controllers=fresh_cluster.controller_endpoints) as admin:
        await admin.create_topic("graceful", 3, 1)
        async with Producer(fresh_cluster.bootstrap) as producer:
            await (await producer.send_batch("graceful", [b"x"] * 300))
        active, _ = await _active(admin)
        for name in ["broker-1", f"controller-{active}"]:
            assert fresh_cluster.signal(name, signal.SIGTERM) == 0
            log = (fresh_cluster.data_dir / "logs" / f"{name}.log").read_text()
            assert f'"event": "{name.split("-")[0]}_stopped"' in log
        hosted = list((fresh_cluster.data_dir / "broker-1").glob("graceful-*"))
        # Closed cleanly: named in the data directory's list (clean_shutdown.py), no marker each.
        listed = CleanShutdown(fresh_cluster.data_dir / "broker-1")
        assert hosted and listed.take() >= len(hosted)
        assert all(listed.consume(folder.name) for folder in hosted)

        async def moved_and_elected() -> bool:  # the broker handed off at once, a new controller took over
            cluster = await admin.describe_cluster()
            return cluster.controller_id != active and 1 not in {broker.broker_id for broker in cluster.brokers}

        await wait_until(moved_and_elected, timeout_s=10, what="the broker to leave and a new controller")


async def _partition_states(cluster: LocalCluster, topic: str) -> dict[int, tuple[PartitionStateRecord, int]]:
    """Each partition's state in etcd and the revision that wrote it."""
    etcd = Etcd3Client([cluster.etcd.endpoint])
    await etcd.connect()
    try:
        assert etcd.kv is not None
        prefix = f"{TOPICS_PREFIX}{topic}/".encode()
        response = await etcd.kv.get(prefix, prefix_range_end(prefix))
        states = {}
        for kv in response.kvs:
            _, partition = parse_topics_key(kv.key.decode())
            if partition is not None:
                states[partition] = (PartitionStateRecord.from_json(kv.value), kv.mod_revision)
        return states
    finally:
        await etcd.close()


async def test_a_stopping_broker_leaves_the_isrs_it_follows_before_its_leaderships_move(
    fresh_cluster: LocalCluster,
) -> None:
    # Both in one step, a leader of a partition the stopping broker followed waited for its fetches
    # (acks=all) while it took its new roles: at 10,000 partitions every producer stood still for
    # 1.6-1.8 s of a rolling restart. Out of those ISRs first, only its own partitions wait.
    async with AdminClient(fresh_cluster.bootstrap, controllers=fresh_cluster.controller_endpoints) as admin:
        await admin.create_topic("steps", 6, 3)
        await wait_until(lambda: _all_in_sync(admin, "steps", 3), timeout_s=15, what="every replica of 'steps' in sync")
        before = await _partition_states(fresh_cluster, "steps")
        led = {partition for partition, (state, _) in before.items() if state.leader == 1}
        assert led and len(led) < 6, "broker 1 leads some partitions and follows others"
        assert fresh_cluster.signal("broker-1", signal.SIGTERM) == 0
        after = await _partition_states(fresh_cluster, "steps")
        assert all(1 not in state.isr for state, _ in after.values()), "out of every ISR"
        assert all(after[partition][0].leader != 1 for partition in led), "its leaderships moved"
        followed_written = max(revision for partition, (_, revision) in after.items() if partition not in led)
        led_written = min(revision for partition, (_, revision) in after.items() if partition in led)
        assert followed_written < led_written


async def _all_in_sync(admin: AdminClient, topic: str, replicas: int) -> bool:
    described = (await admin.describe_topics([topic]))[topic]
    return not isinstance(described, Exception) and all(len(p.isr) == replicas for p in described.partitions)


async def test_a_broker_stopping_right_after_the_controller_died_hands_over_to_its_successor(
    tmp_path: Path,
) -> None:
    # The controller the broker knows is dead; its successor is elected once the dead one's etcd
    # session expires. The stopping broker looks the successor up in etcd and asks it, instead of
    # waiting out controlled.shutdown.retry.backoff.ms (20 s here: longer than the 15 s a SIGTERM'd
    # process is given before signal() gives up on it).
    async with started_cluster(
        tmp_path / "cluster",
        session_timeout_ms=2000,
        broker_args=["--controlled-shutdown-retry-backoff-ms", "20000", "--controlled-shutdown-max-retries", "1"],
    ) as cluster:
        async with AdminClient(cluster.bootstrap, controllers=cluster.controller_endpoints) as admin:
            await admin.create_topic("handover", 3, 3)
            active, _ = await _active(admin)
            leader = (await admin.describe_topics(["handover"]))["handover"]
            assert not isinstance(leader, Exception)
            victim = leader.partitions[0].leader
            cluster.signal(f"controller-{active}", signal.SIGKILL)
            assert cluster.signal(f"broker-{victim}", signal.SIGTERM) == 0
        lines = (cluster.data_dir / "logs" / f"broker-{victim}.log").read_text().splitlines()
        assert any('"controlled_shutdown_done"' in line for line in lines), "the successor moved its leaderships"


async def test_a_killed_controller_is_replaced_long_before_its_lease_would_expire(tmp_path: Path) -> None:
    # A 60 s session: only the standby's death watch (the dead process's port refuses
    # connections) can make another controller active within the deadline, by revoking the lease.
    async with started_cluster(tmp_path / "cluster", session_timeout_ms=60_000) as cluster:
        async with AdminClient(cluster.bootstrap, controllers=cluster.controller_endpoints) as admin:
            active, _ = await _active(admin)
            standby = next(name for name in cluster.controller_ids if name != active)
            cluster.signal(f"controller-{active}", signal.SIGKILL)

            async def replaced() -> bool:
                return (await admin.describe_cluster()).controller_id == standby

            await wait_until(replaced, timeout_s=20, what="the standby to take over before the 60 s lease expires")
            await admin.create_topic("after-failover", 3, 3)  # the new controller serves requests
        log_text = (cluster.data_dir / "logs" / f"controller-{standby}.log").read_text()
        assert '"election_predecessor_dead_lease_revoked"' in log_text


async def test_a_killed_leader_is_replaced_before_its_lease_expires_and_a_frozen_one_is_not(tmp_path: Path) -> None:
    # A 60 s broker session: only the active controller's crash detection (the dead process's port
    # refuses connections) can move the leadership within the deadline, by revoking the lease.
    async with started_cluster(tmp_path / "cluster", session_timeout_ms=60_000) as cluster:
        async with AdminClient(cluster.bootstrap, controllers=cluster.controller_endpoints) as admin:
            await admin.create_topic("crash", 1, 3, {"min.insync.replicas": "2"})

            async def partition() -> common_pb2.PartitionState | None:
                described = (await admin.describe_topics(["crash"]))["crash"]
                if isinstance(described, Exception) or described.partitions[0].leader < 0:
                    return None
                return described.partitions[0]

            first = await wait_until(partition, what="a leader")
            victim = first.leader
            # Frozen, it still holds its port (the kernel accepts connections): only its lease may
            # fence it, so for these seconds it keeps its leadership and its ISR place.
            cluster.signal(f"broker-{victim}", signal.SIGSTOP)
            try:
                await asyncio.sleep(2.0)  # a dozen times what confirming a death takes (0.15 s)
                frozen = await partition()
                assert frozen is not None and frozen.leader == victim and victim in frozen.isr
            finally:
                cluster.signal(f"broker-{victim}", signal.SIGCONT)

            cluster.signal(f"broker-{victim}", signal.SIGKILL)

            async def moved() -> bool:
                state = await partition()
                return state is not None and state.leader != victim and victim not in state.isr

            await wait_until(moved, timeout_s=20, what="a new leader before the 60 s lease expires")
            async with Producer(cluster.bootstrap, acks="all") as producer:
                await (await producer.send("crash", b"after the crash", partition=0))
        controller_logs = "".join(
            (cluster.data_dir / "logs" / f"controller-{number}.log").read_text() for number in cluster.controller_ids
        )
        assert '"broker_lease_revoked"' in controller_logs
