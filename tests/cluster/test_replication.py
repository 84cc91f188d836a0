"""Replication with real processes: acknowledged records survive the loss of their leaders."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tidelog.client import AdminClient, Consumer, Producer, TopicPartition
from tidelog.common.errors import ErrorCode, NotEnoughReplicasError
from tidelog.dev.local_cluster import LocalCluster
from tidelog.v1 import broker_pb2, controller_pb2

from .conftest import started_cluster, wait_until


async def _leader(admin: AdminClient, topic: str, partition: int = 0) -> int:
    described = (await admin.describe_topics([topic]))[topic]
    assert not isinstance(described, Exception)
    return described.partitions[partition].leader


async def _consume(cluster: LocalCluster, topic: str, partitions: int, expected: int) -> list[bytes]:
    got: list[bytes] = []
    async with Consumer(cluster.bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, partition) for partition in range(partitions)])

        async def everything() -> bool:
            got.extend(record.value or b"" for record in await consumer.poll(500))
            return len(got) >= expected

        await wait_until(everything, timeout_s=60, what=f"{expected} records")
    return got


async def test_acknowledged_records_survive_losing_two_leaders(fresh_cluster: LocalCluster) -> None:
    values = [b"%06d" % number for number in range(20_000)]
    async with AdminClient(fresh_cluster.bootstrap, controllers=fresh_cluster.controller_endpoints) as admin:
        await admin.create_topic("durable", 2, 3)
        async with Producer(fresh_cluster.bootstrap, acks="all") as producer:
            await (await producer.send_batch("durable", values[:10_000]))
            first_leader = await _leader(admin, "durable")
            fresh_cluster.signal(f"broker-{first_leader}", signal.SIGKILL)
            await (await producer.send_batch("durable", values[10_000:]))  # retried onto new leaders
        second_leader = await wait_until(lambda: _leader(admin, "durable"), what="a new leader")
        assert second_leader not in (first_leader, -1)
        fresh_cluster.signal(f"broker-{second_leader}", signal.SIGKILL)

        async def last_one_leads() -> bool:
            return all(
                leader not in (first_leader, second_leader, -1)
                for leader in [await _leader(admin, "durable", 0), await _leader(admin, "durable", 1)]
            )

        await wait_until(last_one_leads, what="the last replica to lead both partitions")
    got = await _consume(fresh_cluster, "durable", 2, len(values))
    assert sorted(got) == values  # every acknowledged record, once, on the one replica left


async def test_min_insync_replicas_refuses_acks_all(fresh_cluster: LocalCluster) -> None:
    async with AdminClient(fresh_cluster.bootstrap, controllers=fresh_cluster.controller_endpoints) as admin:
        await admin.create_topic("strict", 1, 2, {"min.insync.replicas": "2"})
        async with Producer(fresh_cluster.bootstrap, acks="all", delivery_timeout_ms=3000) as producer:
            assert (await (await producer.send("strict", b"ok", partition=0))).offset == 0
        described = (await admin.describe_topics(["strict"]))["strict"]
        assert not isinstance(described, Exception)
        follower = next(
            broker for broker in described.partitions[0].replicas if broker != described.partitions[0].leader
        )
        fresh_cluster.signal(f"broker-{follower}", signal.SIGTERM)

        async def isr_shrunk() -> bool:
            topic = (await admin.describe_topics(["strict"]))["strict"]
            return not isinstance(topic, Exception) and list(topic.partitions[0].isr) == [topic.partitions[0].leader]

        await wait_until(isr_shrunk, what="the ISR to lose the stopped follower")
        async with Producer(
            fresh_cluster.bootstrap, acks="all", delivery_timeout_ms=2000, retry_backoff_ms=200
        ) as producer:
            with pytest.raises(NotEnoughReplicasError):
                await (await producer.send("strict", b"refused", partition=0))
            # acks=1 still works: the leader alone is enough for it
        async with Producer(fresh_cluster.bootstrap, acks=1) as producer:
            assert (await (await producer.send("strict", b"leader-only", partition=0))).offset == 1


async def test_a_stalled_follower_leaves_the_isr_and_returns(tmp_path: Path) -> None:
    # The lease outlives the lag: the follower leaves the ISR by AlterPartition, not by dying.
    async with (
        started_cluster(
            tmp_path / "cluster", session_timeout_ms=10_000, broker_args=["--replica-lag-time-max-ms", "1000"]
        ) as cluster,
        AdminClient(cluster.bootstrap, controllers=cluster.controller_endpoints) as admin,
    ):
        await admin.create_topic("isr", 1, 3, {"min.insync.replicas": "2"})
        async with Producer(cluster.bootstrap, acks="all") as producer:
            await (await producer.send_batch("isr", [b"before"] * 100, partition=0))
            state = (await admin.describe_topics(["isr"]))["isr"]
            assert not isinstance(state, Exception) and len(state.partitions[0].isr) == 3
            leader = state.partitions[0].leader
            stalled = next(broker for broker in state.partitions[0].replicas if broker != leader)
            cluster.signal(f"broker-{stalled}", signal.SIGSTOP)

            async def isr_without_stalled() -> bool:
                topic = (await admin.describe_topics(["isr"]))["isr"]
                return not isinstance(topic, Exception) and stalled not in topic.partitions[0].isr

            await wait_until(isr_without_stalled, timeout_s=30, what="the stalled follower to leave the ISR")
            live = {broker.broker_id for broker in (await admin.describe_cluster()).brokers}
            assert stalled in live  # still registered: the ISR changed by AlterPartition
            # acks=all goes on with the two in-sync replicas left (min.insync.replicas=2)
            await (await producer.send_batch("isr", [b"during"] * 100, partition=0))
            cluster.signal(f"broker-{stalled}", signal.SIGCONT)

            async def isr_whole_again() -> bool:
                topic = (await admin.describe_topics(["isr"]))["isr"]
                return not isinstance(topic, Exception) and len(topic.partitions[0].isr) == 3

            await wait_until(isr_whole_again, timeout_s=60, what="the follower to catch up and rejoin")


@pytest.mark.parametrize("unclean", [False, True])
async def test_unclean_leader_election_is_the_topics_choice(fresh_cluster: LocalCluster, unclean: bool) -> None:
    topic = f"unclean-{unclean}".lower()
    async with AdminClient(fresh_cluster.bootstrap, controllers=fresh_cluster.controller_endpoints) as admin:
        await admin.create_topic(topic, 1, 2, {"unclean.leader.election.enable": str(unclean).lower()})
        described = (await admin.describe_topics([topic]))[topic]
        assert not isinstance(described, Exception)
        leader = described.partitions[0].leader
        follower = next(broker for broker in described.partitions[0].replicas if broker != leader)
        fresh_cluster.signal(f"broker-{follower}", signal.SIGKILL)  # the follower leaves the ISR ...

        async def alone() -> bool:
            state = (await admin.describe_topics([topic]))[topic]
            return not isinstance(state, Exception) and list(state.partitions[0].isr) == [leader]

        await wait_until(alone, what="the ISR to shrink to the leader")
        fresh_cluster.signal(f"broker-{leader}", signal.SIGKILL)  # ... the only in-sync replica dies ...
        fresh_cluster.start_broker(follower)  # ... and the out-of-sync one comes back
        await fresh_cluster.wait_ready(brokers=[follower])

        # The follower's own metadata lists it live and the old leader gone only once the controller
        # handled both (it decides, then pushes the state): read the decision there.
        returned = admin.connections.broker(fresh_cluster.bootstrap[follower - 1])

        async def decision() -> broker_pb2.MetadataResponse | None:
            response = await returned.Metadata(broker_pb2.MetadataRequest(topics=[topic]), timeout=5)
            live = {broker.broker_id for broker in response.brokers}
            settled = follower in live and leader not in live and response.topics and response.topics[0].partitions
            return response if settled else None

        state = (await wait_until(decision, what="the controller's decision")).topics[0].partitions[0]
        if unclean:
            assert state.leader == follower and list(state.isr) == [follower]
        else:
            assert state.leader == -1 and list(state.isr) == [leader]  # offline, waiting for the in-sync replica


async def test_a_replica_joins_the_isr_only_on_fetches_of_its_registered_life(
    cluster: LocalCluster, admin: AdminClient, topic_name: str
) -> None:
    # KIP-903: the controller admits a joining replica only if the leader saw fetches from the life
    # registered now. A leader still holding a restarted broker's old position must be refused.
    await admin.create_topic(topic_name, 1, 3)
    incarnations = {broker.broker_id: broker.incarnation for broker in (await admin.describe_cluster()).brokers}
    controller = admin.connections.controller(
        cluster.controller_endpoints[(await admin.describe_cluster()).controller_id - 1]
    )
    response = await controller.AlterPartition(  # a request for no state at all: answered with the current one
        controller_pb2.AlterPartitionRequest(
            partitions=[controller_pb2.PartitionIsrChange(topic=topic_name, partition=0, partition_epoch=-1)]
        ),
        timeout=5,
    )
    current = response.partitions[0].state

    async def alter(isr: list[int], lives: dict[int, str]) -> controller_pb2.PartitionIsrResult | None:
        nonlocal current
        change = controller_pb2.PartitionIsrChange(
            topic=topic_name,
            partition=0,
            leader_epoch=current.leader_epoch,
            partition_epoch=current.partition_epoch,
            new_isr=isr,
            new_isr_incarnations=lives,
        )
        response = await controller.AlterPartition(
            controller_pb2.AlterPartitionRequest(broker_id=current.leader, partitions=[change]), timeout=5
        )
        answer = response.partitions[0]
        current = answer.state
        # The leader's own ISR check may change the state between our read and our request.
        return None if answer.error_code == ErrorCode.INVALID_UPDATE_VERSION else answer

    follower = next(broker for broker in current.replicas if broker != current.leader)
    # Frozen, the follower fetches nothing, so its leader will not re-add it on its own meanwhile
    # (well within its etcd session: it stays registered).
    cluster.signal(f"broker-{follower}", signal.SIGSTOP)
    try:
        shrunk = await wait_until(lambda: alter([b for b in current.isr if b != follower], {}), what="a shrink")
        assert shrunk.error_code == 0 and follower not in shrunk.state.isr
        stale = {follower: "an-earlier-life"}
        refused = await wait_until(lambda: alter([*current.isr, follower], stale), what="an answer")
        assert refused.error_code == ErrorCode.INELIGIBLE_REPLICA, refused
        assert "earlier life" in refused.error_message
        live = {follower: incarnations[follower]}
        answered = await wait_until(lambda: alter([*current.isr, follower], live), what="an answer")
        assert answered.error_code == 0 and follower in answered.state.isr
    finally:
        cluster.signal(f"broker-{follower}", signal.SIGCONT)


async def test_fetch_sessions_keep_every_follower_up_to_date_when_a_response_cannot_hold_all(
    tmp_path: Path,
) -> None:
    # Incremental fetch sessions (KIP-227) answer only partitions with news. With a response too
    # small for every partition's news (replica.fetch.response.max.bytes of 1 KiB, 60 partitions
    # written at once), the ones left out must come in a later fetch: an acks=all produce to every
    # partition completes only if every follower catches up on every partition, and the ISR may not
    # shrink meanwhile (replica.lag.time.max.ms of a minute).
    async with (
        started_cluster(
            tmp_path / "cluster",
            broker_args=["--replica-fetch-response-max-bytes", "1024", "--replica-lag-time-max-ms", "60000"],
        ) as cluster,
        AdminClient(cluster.bootstrap, controllers=cluster.controller_endpoints) as admin,
    ):
        await admin.create_topic("sessions", 60, 3, {"min.insync.replicas": "3"})
        # Bounded: a partition left out and never answered again would time its delivery out.
        async with Producer(
            cluster.bootstrap, acks="all", request_timeout_ms=10_000, delivery_timeout_ms=15_000
        ) as producer:
            for round_number in range(3):  # the second and third rounds go through live sessions
                deliveries = [
                    await producer.send("sessions", b"%d-%d" % (round_number, p) * 100, partition=p) for p in range(60)
                ]
                for delivery in deliveries:
                    assert (await delivery).offset == round_number
        described = (await admin.describe_topics(["sessions"]))["sessions"]
        assert not isinstance(described, Exception)
        assert all(len(partition.isr) == 3 for partition in described.partitions)


async def test_alter_partition_answers_each_change_and_refuses_an_oversized_request(
    cluster: LocalCluster, admin: AdminClient, topic_name: str
) -> None:
    await admin.create_topic(topic_name, 2, 3)
    controller = admin.connections.controller(
        cluster.controller_endpoints[(await admin.describe_cluster()).controller_id - 1]
    )
    stale = controller_pb2.PartitionIsrChange(topic=topic_name, partition=0, partition_epoch=-1)
    unknown = controller_pb2.PartitionIsrChange(topic=topic_name, partition=7)
    response = await controller.AlterPartition(
        controller_pb2.AlterPartitionRequest(broker_id=1, partitions=[stale, unknown, stale]), timeout=5
    )
    assert [(result.partition, ErrorCode(result.error_code)) for result in response.partitions] == [
        (
            0,
            ErrorCode.FENCED_LEADER_EPOCH
            if response.partitions[0].state.leader != 1
            else ErrorCode.INVALID_UPDATE_VERSION,
        ),
        (7, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        (
            0,
            ErrorCode.FENCED_LEADER_EPOCH
            if response.partitions[0].state.leader != 1
            else ErrorCode.INVALID_UPDATE_VERSION,
        ),
    ]
    assert response.partitions[0].state.topic == topic_name  # the state in force comes with a refusal
    oversized = controller_pb2.AlterPartitionRequest(broker_id=1, partitions=[stale] * 10_001)
    refused = await controller.AlterPartition(oversized, timeout=5)
    assert refused.error_code == ErrorCode.INVALID_REQUEST and not refused.partitions
