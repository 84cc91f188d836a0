"""Transactions on real brokers and coordinators. Below the producer API: transactional batches and
the markers a transaction coordinator writes (WriteTxnMarkers), read back with each isolation
level, and the same answers from a new leader after the old one dies. Through it: commits, aborts,
a zombie fenced by a newer instance, a transaction aborted by its timeout."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from tidelog.client import EARLIEST, LATEST, AdminClient, Consumer, GroupConsumer, OffsetRange, Producer, TopicPartition
from tidelog.client.transaction_manager import TransactionAbortedError
from tidelog.common.errors import ErrorCode, ProducerFencedError
from tidelog.common.record.batch import encode_batch
from tidelog.dev.local_cluster import LocalCluster
from tidelog.v1 import broker_pb2, broker_pb2_grpc

from ..transactional_writes import (
    COMMITTED,
    EVERY_RECORD,
    end_transactions,
    produce,
    transactional,
    write_open_transactions,
)
from .conftest import COORDINATOR_ARGS, running_cluster, started_cluster, wait_until

UNVERIFIED = ["--transaction-partition-verification-enable", "false"]  # writes below the coordinator


@pytest.fixture(scope="module")
def raw_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """Brokers that take transactional batches no coordinator verified (as before KIP-890): the
    tests below the producer API write them, and so does a hanging transaction."""
    with running_cluster(
        Path(tmp_path_factory.mktemp("raw")), coordinators=1, coordinator_args=COORDINATOR_ARGS, broker_args=UNVERIFIED
    ) as cluster:
        yield cluster


async def _leader(admin: AdminClient, cluster: LocalCluster, topic: str) -> tuple[int, str]:
    described = (await admin.describe_topics([topic]))[topic]
    assert not isinstance(described, Exception)
    leader = described.partitions[0].leader
    return leader, cluster.broker_endpoint(leader) if leader >= 0 else ""


async def _read(cluster: LocalCluster, topic: str, isolation: str, end: int) -> list[bytes | None]:
    """Every record a consumer with `isolation` returns from the start until its position is `end`."""
    tp = TopicPartition(topic, 0)
    values: list[bytes | None] = []
    async with Consumer(cluster.bootstrap, isolation_level=isolation) as consumer:
        consumer.assign([tp])
        await consumer.seek_to_beginning([tp])

        async def at_end() -> bool:
            values.extend(record.value for record in await consumer.poll(200))
            return await consumer.position(tp) >= end

        await wait_until(at_end, what=f"a {isolation} consumer at offset {end}")
    return values


async def _ends(cluster: LocalCluster, topic: str) -> tuple[int, int]:
    """(end offset for read_uncommitted, for read_committed): the high and last stable offsets."""
    tp = TopicPartition(topic, 0)
    ends = []
    for isolation in ("read_uncommitted", "read_committed"):
        async with Consumer(cluster.bootstrap, isolation_level=isolation) as consumer:
            ends.append((await consumer.end_offsets([tp]))[tp])
    return ends[0], ends[1]


async def _write_transactions(cluster: LocalCluster, admin: AdminClient, topic: str) -> None:
    """Offsets: 0-1 producer A (aborted), 2 producer B (committed), 3 plain, 4 A's ABORT, 5 B's COMMIT."""
    await admin.create_topic(topic, 1, 3, {"min.insync.replicas": "2"})
    _, endpoint = await wait_until(lambda: _leader(admin, cluster, topic), what="a leader")
    async with grpc.aio.insecure_channel(endpoint) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        a, b = await write_open_transactions(stub, topic)
        # Both transactions open: read_committed ends at the first one's start.
        assert await _ends(cluster, topic) == (4, 0)
        refused = await stub.Produce(
            broker_pb2.ProduceRequest(
                acks=-1,
                timeout_ms=10_000,
                partitions=[
                    broker_pb2.ProducePartition(
                        topic=topic,
                        record_batches=encode_batch([b"x"], producer_id=a, producer_epoch=0, base_sequence=2),
                    )
                ],
            )
        )
        assert refused.partitions[0].error_code == ErrorCode.INVALID_TXN_STATE
        await end_transactions(stub, topic, a, b)
    # Markers go with acks=all: answered, they are below the high watermark and the partition is stable.
    assert await _ends(cluster, topic) == (6, 6)


async def test_read_committed_skips_aborted_transactions_and_no_reader_sees_markers(
    raw_cluster: LocalCluster, topic_name: str
) -> None:
    async with AdminClient(raw_cluster.bootstrap, controllers=raw_cluster.controller_endpoints) as admin:
        await _write_transactions(raw_cluster, admin, topic_name)
    assert await _read(raw_cluster, topic_name, "read_committed", 6) == COMMITTED
    assert await _read(raw_cluster, topic_name, "read_uncommitted", 6) == EVERY_RECORD


async def test_a_new_leader_answers_read_committed_as_the_old_one(tmp_path: Path) -> None:
    """Followers replicate the markers and build the aborted-transaction index themselves."""
    async with started_cluster(tmp_path / "cluster", broker_args=UNVERIFIED) as fresh_cluster:
        await _new_leader_answers(fresh_cluster)


async def _new_leader_answers(fresh_cluster: LocalCluster) -> None:
    async with AdminClient(fresh_cluster.bootstrap, controllers=fresh_cluster.controller_endpoints) as admin:
        await _write_transactions(fresh_cluster, admin, "moved")
        leader, _ = await _leader(admin, fresh_cluster, "moved")
        fresh_cluster.signal(f"broker-{leader}", signal.SIGKILL)

        async def moved() -> int | None:
            found, _ = await _leader(admin, fresh_cluster, "moved")
            return found if found not in (leader, -1) else None

        await wait_until(moved, what="a new leader")
    assert await _read(fresh_cluster, "moved", "read_committed", 6) == COMMITTED
    assert await _ends(fresh_cluster, "moved") == (6, 6)


# ---- through the producer API -------------------------------------------------------------------


@pytest.fixture(scope="module")
def txn_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    arguments = [*COORDINATOR_ARGS, "--transaction-abort-timed-out-transaction-cleanup-interval-ms", "200"]
    with running_cluster(Path(tmp_path_factory.mktemp("txn")), coordinators=2, coordinator_args=arguments) as cluster:
        yield cluster


async def _committed(
    cluster: LocalCluster, topic: str, partitions: int, isolation: str = "read_committed"
) -> list[bytes]:
    """Every record value of `topic` (partition by partition) a reader with `isolation` returns,
    once it has read up to each partition's end for that isolation."""
    tps = [TopicPartition(topic, partition) for partition in range(partitions)]
    values: list[bytes] = []
    async with Consumer(cluster.bootstrap, isolation_level=isolation) as consumer:
        ends = await consumer.end_offsets(tps)
        for tp in tps:
            consumer.assign([tp])
            await consumer.seek_to_beginning([tp])

            async def at_end(tp: TopicPartition = tp) -> bool:
                values.extend(record.value or b"" for record in await consumer.poll(200))
                return await consumer.position(tp) >= ends[tp]

            await wait_until(at_end, what=f"{tp} read to {ends[tp]}")
    return values


async def test_committed_transactions_are_read_and_aborted_ones_never(
    txn_cluster: LocalCluster, topic_name: str
) -> None:
    async with AdminClient(txn_cluster.bootstrap, controllers=txn_cluster.controller_endpoints) as admin:
        await admin.create_topic(topic_name, 2, 3, {"min.insync.replicas": "2"})
    async with Producer(txn_cluster.bootstrap, transactional_id=f"{topic_name}-tx") as producer:
        with pytest.raises(RuntimeError, match="uninitialized"):
            await producer.send(topic_name, b"too early")
        await producer.init_transactions()
        for number, commit in ((1, True), (2, False), (3, True)):
            producer.begin_transaction()
            for partition in (0, 1):
                delivery = await producer.send(topic_name, b"txn%d-p%d" % (number, partition), partition=partition)
                if not commit:
                    await delivery  # written before the abort: read_uncommitted readers see it
            if commit:
                await producer.commit_transaction()
            else:
                await producer.abort_transaction()
        with pytest.raises(RuntimeError, match="ready"):
            await producer.send(topic_name, b"outside a transaction")
        producer.begin_transaction()
        unsent = await producer.send(topic_name, b"never sent", partition=0)
        await producer.abort_transaction()
        with pytest.raises(TransactionAbortedError):
            await unsent
    committed = await _committed(txn_cluster, topic_name, 2)
    assert committed == [b"txn1-p0", b"txn3-p0", b"txn1-p1", b"txn3-p1"]
    everything = await _committed(txn_cluster, topic_name, 2, "read_uncommitted")
    assert everything == [b"txn1-p0", b"txn2-p0", b"txn3-p0", b"txn1-p1", b"txn2-p1", b"txn3-p1"]


async def test_offset_ranges_answer_what_three_list_offsets_rounds_did(
    txn_cluster: LocalCluster, topic_name: str
) -> None:
    # The controller's kafka_exporter view asked three rounds (earliest, latest, latest
    # read_committed) over every partition each refresh: at 10,000 partitions, half of an idle
    # broker's CPU. One round's answers carry all three.
    async with AdminClient(txn_cluster.bootstrap, controllers=txn_cluster.controller_endpoints) as admin:
        await admin.create_topic(topic_name, 2, 3, {"min.insync.replicas": "2"})
    async with Producer(txn_cluster.bootstrap) as plain:
        await (await plain.send_batch(topic_name, [b"committed"] * 4, partition=0))
    tps = [TopicPartition(topic_name, 0), TopicPartition(topic_name, 1)]
    async with Producer(txn_cluster.bootstrap, transactional_id=f"{topic_name}-tx") as producer:
        await producer.init_transactions()
        producer.begin_transaction()
        await (await producer.send_batch(topic_name, [b"open"] * 2, partition=0))  # written, not committed
        async with Consumer(txn_cluster.bootstrap) as consumer:
            ranges = await consumer.offset_ranges(tps)
            assert ranges[tps[0]] == OffsetRange(log_start_offset=0, high_watermark=6, last_stable_offset=4)
            assert ranges[tps[1]] == OffsetRange(0, 0, 0)
            assert {tp: offsets.log_start_offset for tp, offsets in ranges.items()} == await consumer.list_offsets(
                tps, EARLIEST
            )
            assert {tp: offsets.high_watermark for tp, offsets in ranges.items()} == await consumer.list_offsets(
                tps, LATEST
            )
            stable = await consumer.list_offsets(tps, LATEST, read_committed=True)
            assert {tp: offsets.last_stable_offset for tp, offsets in ranges.items()} == stable
        await producer.abort_transaction()


async def test_a_new_instance_fences_the_zombie_and_aborts_what_it_left_open(
    txn_cluster: LocalCluster, topic_name: str
) -> None:
    async with AdminClient(txn_cluster.bootstrap, controllers=txn_cluster.controller_endpoints) as admin:
        await admin.create_topic(topic_name, 1, 3, {"min.insync.replicas": "2"})
    transactional_id = f"{topic_name}-tx"
    async with Producer(txn_cluster.bootstrap, transactional_id=transactional_id) as zombie:
        await zombie.init_transactions()
        zombie.begin_transaction()
        await (await zombie.send(topic_name, b"zombie"))  # written, in an open transaction
        async with Producer(txn_cluster.bootstrap, transactional_id=transactional_id) as successor:
            await successor.init_transactions()  # aborts the zombie's transaction first
            successor.begin_transaction()
            await successor.send(topic_name, b"successor")
            await successor.commit_transaction()
        with pytest.raises(ProducerFencedError):
            await zombie.commit_transaction()
        with pytest.raises(ProducerFencedError):
            zombie.begin_transaction()
    assert await _committed(txn_cluster, topic_name, 1) == [b"successor"]


async def test_a_transaction_past_its_timeout_is_aborted_by_the_coordinator(
    txn_cluster: LocalCluster, topic_name: str
) -> None:
    async with AdminClient(txn_cluster.bootstrap, controllers=txn_cluster.controller_endpoints) as admin:
        await admin.create_topic(topic_name, 1, 3, {"min.insync.replicas": "2"})
    tp = TopicPartition(topic_name, 0)
    async with Producer(
        txn_cluster.bootstrap, transactional_id=f"{topic_name}-tx", transaction_timeout_ms=1000
    ) as producer:
        await producer.init_transactions()
        producer.begin_transaction()
        await (await producer.send(topic_name, b"slow"))
        async with Consumer(txn_cluster.bootstrap, isolation_level="read_committed") as consumer:

            async def stable() -> bool:
                return (await consumer.end_offsets([tp]))[tp] == 2  # the record and the abort marker

            await wait_until(stable, what="the coordinator to abort the transaction")
        with pytest.raises(ProducerFencedError):
            await producer.commit_transaction()
    assert await _committed(txn_cluster, topic_name, 1) == []


async def test_consume_transform_produce_reads_each_input_once_across_an_abort(
    txn_cluster: LocalCluster, topic_name: str
) -> None:
    """The offsets commit with the output: an aborted round is read again and written once."""
    source, sink, group = f"{topic_name}-in", f"{topic_name}-out", f"{topic_name}-group"
    async with AdminClient(txn_cluster.bootstrap, controllers=txn_cluster.controller_endpoints) as admin:
        for topic in (source, sink):
            await admin.create_topic(topic, 1, 3, {"min.insync.replicas": "2"})
    async with Producer(txn_cluster.bootstrap) as plain:
        await (await plain.send_batch(source, [b"%d" % number for number in range(30)], partition=0))
    tp = TopicPartition(source, 0)
    rounds = 0
    async with (
        GroupConsumer(
            txn_cluster.bootstrap,
            group,
            isolation_level="read_committed",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            max_poll_records=10,
        ) as consumer,
        Producer(txn_cluster.bootstrap, transactional_id=f"{topic_name}-ctp") as producer,
    ):
        consumer.subscribe([source])
        await producer.init_transactions()

        async def all_done() -> bool:
            nonlocal rounds
            records = await consumer.poll(200)
            if not records:
                return (await consumer.committed([tp]))[tp] == 30
            rounds += 1
            producer.begin_transaction()
            for record in records:
                await producer.send(sink, b"out-" + (record.value or b""), partition=0)
            await producer.send_offsets_to_transaction({tp: records[-1].offset + 1}, consumer)
            if rounds == 2:  # a failure mid-way: the round is aborted, and read again from the commit
                await producer.abort_transaction()
                consumer.seek(tp, (await consumer.committed([tp]))[tp] or 0)
            else:
                await producer.commit_transaction()
            return False

        await wait_until(all_done, timeout_s=60, what="every input processed")
    assert rounds >= 4
    assert await _committed(txn_cluster, sink, 1) == [b"out-%d" % number for number in range(30)]


def _cli(cluster: LocalCluster, *arguments: str) -> Any:
    """`tidelog transactions ...` as a user runs it, its JSON answer."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tidelog.cli.main",
            "transactions",
            *arguments,
            "--bootstrap",
            ",".join(cluster.bootstrap),
            "-o",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout) if done.stdout.strip().startswith(("[", "{")) else done.stdout


async def test_the_transactions_tool_lists_describes_and_aborts_a_hanging_transaction(
    raw_cluster: LocalCluster, topic_name: str
) -> None:
    async with AdminClient(raw_cluster.bootstrap, controllers=raw_cluster.controller_endpoints) as admin:
        await admin.create_topic(topic_name, 1, 3, {"min.insync.replicas": "2"})
    tp = TopicPartition(topic_name, 0)
    transactional_id = f"{topic_name}-tx"
    async with Producer(raw_cluster.bootstrap, transactional_id=transactional_id) as producer:
        await producer.init_transactions()
        producer.begin_transaction()
        await (await producer.send(topic_name, b"open", partition=0))
        listed = await asyncio.to_thread(_cli, raw_cluster, "list", "--state", "Ongoing")
        assert {
            "transactional_id": transactional_id,
            "producer_id": producer.sequences.producer_id,
            "state": "Ongoing",
        } in listed
        described = await asyncio.to_thread(_cli, raw_cluster, "describe", transactional_id)
        assert (described["state"], described["partitions"]) == ("Ongoing", [str(tp)])
        producers = await asyncio.to_thread(
            _cli, raw_cluster, "describe-producers", "--topic", topic_name, "--partition", "0"
        )
        assert [(p["producer_id"], p["current_transaction_start_offset"]) for p in producers] == [
            (producer.sequences.producer_id, 0)
        ]
        await producer.commit_transaction()
    async with Consumer(raw_cluster.bootstrap, isolation_level="read_committed") as consumer:

        async def marked() -> bool:
            return (await consumer.end_offsets([tp]))[tp] == 2  # the record and its COMMIT marker

        await wait_until(marked, what="the commit's marker")
    # A transaction no coordinator knows: written straight to the leader by a producer id of its own.
    async with AdminClient(raw_cluster.bootstrap, controllers=raw_cluster.controller_endpoints) as admin:
        _, endpoint = await wait_until(lambda: _leader(admin, raw_cluster, topic_name), what="a leader")
    async with grpc.aio.insecure_channel(endpoint) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        orphan = (await stub.InitProducerId(broker_pb2.InitProducerIdRequest())).producer_id
        hanging_at = await produce(stub, topic_name, transactional(orphan, [b"hanging"]))
    async with Consumer(raw_cluster.bootstrap, isolation_level="read_committed") as consumer:
        assert (await consumer.end_offsets([tp]))[tp] == hanging_at  # stuck at the orphan's start
        found = await asyncio.to_thread(
            _cli, raw_cluster, "find-hanging", "--topic", topic_name, "--max-transaction-timeout-ms", "0"
        )
        assert [(entry["producer_id"], entry["current_transaction_start_offset"]) for entry in found] == [
            (orphan, hanging_at)
        ]
        await asyncio.to_thread(
            _cli, raw_cluster, "abort", "--topic", topic_name, "--partition", "0", "--start-offset", str(hanging_at)
        )

        async def unstuck() -> bool:
            return (await consumer.end_offsets([tp]))[tp] == hanging_at + 2  # the record and its ABORT marker

        await wait_until(unstuck, what="the last stable offset past the aborted transaction")
    assert await _committed(raw_cluster, topic_name, 1) == [b"open"]


async def test_a_transaction_the_coordinator_does_not_hold_cannot_start_in_a_partition(
    txn_cluster: LocalCluster, topic_name: str
) -> None:
    """KIP-890 part 1: a transactional batch for a partition the coordinator did not add to the
    transaction (or without a transactional.id) is refused, and nothing is written there."""
    async with AdminClient(txn_cluster.bootstrap, controllers=txn_cluster.controller_endpoints) as admin:
        await admin.create_topic(topic_name, 2, 3, {"min.insync.replicas": "2"})
        _, endpoint = await wait_until(lambda: _leader(admin, txn_cluster, topic_name), what="a leader")
    async with Producer(txn_cluster.bootstrap, transactional_id=f"{topic_name}-tx") as producer:
        await producer.init_transactions()
        producer.begin_transaction()
        await (await producer.send(topic_name, b"added", partition=0))  # added, verified, written
        producer_id, epoch = producer.sequences.producer_id, producer.sequences.producer_epoch
        async with grpc.aio.insecure_channel(endpoint) as channel:
            stub = broker_pb2_grpc.BrokerStub(channel)
            batch = encode_batch(
                [b"never added"], producer_id=producer_id, producer_epoch=epoch, base_sequence=0, transactional=True
            )
            for transactional_id, code in (
                (f"{topic_name}-tx", ErrorCode.INVALID_TXN_STATE),
                ("", ErrorCode.INVALID_TXN_STATE),
            ):
                answer = await stub.Produce(
                    broker_pb2.ProduceRequest(
                        acks=-1,
                        timeout_ms=10_000,
                        transactional_id=transactional_id,
                        partitions=[broker_pb2.ProducePartition(topic=topic_name, partition=1, record_batches=batch)],
                    )
                )
                assert answer.partitions[0].error_code == code, answer.partitions[0].error_message
        await producer.commit_transaction()
    assert await _committed(txn_cluster, topic_name, 2, "read_uncommitted") == [b"added"]  # partition 1: nothing
