"""The coordinator process, group and transaction coordinators together:
`python -m tidelog.coordinator.main --id 1 --port 9300 --etcd host:port`.

Finds the brokers through etcd, creates `__consumer_offsets` and `__transaction_state` if they are
missing, then takes its share of both topics' partitions (partition_ownership.py): for each one it
writes a fence record with its new claim epoch, replays the partition up to it
(loadGroupsAndOffsets, loadTransactionsForTxnTopicPartition), and serves the groups or
transactional ids there.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import time
from collections.abc import Callable, Coroutine
from typing import Any

import grpc
import structlog
from etcd3aio import Etcd3Client

from tidelog.client import AdminClient, Consumer, TopicPartition
from tidelog.client.cluster_metadata import ClusterMetadata
from tidelog.client.connections import Connections
from tidelog.common.errors import ErrorCode, RemoteError, TidelogError
from tidelog.common.record.batch import RecordBatch
from tidelog.common.settings import CoordinatorSettings, SecuritySettings, parse_process_args
from tidelog.coordinator import coordinator_metrics
from tidelog.coordinator.coordinator_service import CoordinatorService
from tidelog.coordinator.group_coordinator import GroupCoordinator
from tidelog.coordinator.offsets_records import FENCE_KEY
from tidelog.coordinator.offsets_tail import OffsetsTail
from tidelog.coordinator.offsets_writer import TXN_STATE_PRODUCER_ID_BASE, FencedOffsetsWriter
from tidelog.coordinator.partition_ownership import OwnedTopic, PartitionOwnership
from tidelog.coordinator.txn_coordinator import TxnCoordinator
from tidelog.coordinator.txn_marker_writer import TxnMarkerWriter
from tidelog.coordinator.txn_offsets import TxnOffsetCommits
from tidelog.coordinator.txn_records import txn_key
from tidelog.coordinator.txn_service import TxnService
from tidelog.server_common.etcd.connect import etcd_client
from tidelog.server_common.etcd.registry import registered_brokers
from tidelog.server_common.metadata import (
    CONSUMER_OFFSETS_TOPIC,
    COORDINATOR_PARTITIONS_PREFIX,
    TRANSACTION_STATE_TOPIC,
    TXN_COORDINATOR_PARTITIONS_PREFIX,
    CoordinatorInstanceRecord,
)
from tidelog.server_common.runtime import run_process, run_service
from tidelog.server_common.security.service_security import ServiceSecurity
from tidelog.v1 import broker_pb2, coordinator_pb2_grpc, transaction_pb2_grpc

log = structlog.get_logger(__name__)

LOAD_TIMEOUT_S = 120.0
TICK_S = 0.1


PRODUCER_ID_TIMEOUT_S = 10.0
FACTOR_SETTING = {
    CONSUMER_OFFSETS_TOPIC: "offsets.topic.replication.factor",
    TRANSACTION_STATE_TOPIC: "transaction.state.log.replication.factor",
}
OFFSETS_TOPIC_WAIT_S = 60.0  # how long a starting coordinator waits for brokers to know the cluster
OFFSETS_TOPIC_RETRY_S = 0.2


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Tidelog group coordinator")
    parser.add_argument("--id", type=int, required=True, help="coordinator instance id")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--advertised-host", help="host clients are told to use (default: --host)")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--metrics-port", type=int, default=0)
    parser.add_argument("--etcd", required=True, help="etcd endpoints host:port,... (every member)")
    return parse_process_args(parser, CoordinatorSettings, argv)


async def _ensure_offsets_topic(
    bootstrap: list[str],
    partitions: int,
    factor: int,
    *,
    security: SecuritySettings,
    wait_s: float = OFFSETS_TOPIC_WAIT_S,
    topic: str = CONSUMER_OFFSETS_TOPIC,
) -> None:
    """Create __consumer_offsets (or `topic`: __transaction_state) unless it exists. Brokers refuse
    Metadata (UNAVAILABLE) until a controller has sent them the cluster's, so a coordinator
    starting with the cluster waits for that instead of exiting (a start-up race CI met), and for
    `factor` live brokers."""
    deadline = time.monotonic() + wait_s
    async with AdminClient(bootstrap, security=security) as admin:
        while True:
            try:
                described = (await admin.describe_topics([topic]))[topic]
                break
            except ConnectionError as error:
                if time.monotonic() > deadline:
                    raise
                log.info("waiting_for_cluster_metadata", error=str(error).splitlines()[0])
                await asyncio.sleep(OFFSETS_TOPIC_RETRY_S)
        if not isinstance(described, TidelogError):
            return
        # As Kafka: created with exactly offsets.topic.replication.factor replicas, once that many
        # brokers are alive — never silently fewer (a coordinator that started before the third
        # broker registered made it with RF 2). A dev cluster of fewer brokers sets the factor.
        while (live := len((await admin.describe_cluster()).brokers)) < factor:
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"{topic} needs {FACTOR_SETTING.get(topic, 'its replication factor')}={factor} live brokers; "
                    f"{live} registered after {wait_s:.0f} s (set the factor to the cluster's size)"
                )
            log.info("waiting_for_offsets_topic_brokers", topic=topic, live=live, replication_factor=factor)
            await asyncio.sleep(OFFSETS_TOPIC_RETRY_S)
        configs = {"cleanup.policy": "compact", "segment.bytes": str(100 * 1024 * 1024)}
        configs["min.insync.replicas"] = str(min(2, factor))
        try:
            await admin.create_topic(topic, partitions, factor, configs)
            log.info("offsets_topic_created", topic=topic, partitions=partitions, replication_factor=factor)
        except TidelogError as error:
            if error.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                raise


class _Loaded:
    """What loading a partition drives: a group coordinator's or a transaction coordinator's.
    `finish(partition, next_offset)`: loaded up to `next_offset`, the fence's end."""

    def __init__(
        self,
        begin: Callable[[int, int], None],
        replay: Callable[[int, RecordBatch], None],
        finish: Callable[[int, int], None],
        unload: Callable[[int], None],
        fence_key: bytes,
    ) -> None:
        self.begin, self.replay, self.finish, self.unload, self.fence_key = begin, replay, finish, unload, fence_key


def _records_of(replay: Callable[[int, bytes, bytes | None], None]) -> Callable[[int, RecordBatch], None]:
    """A replay by record (the transaction coordinator's: its topic holds no markers)."""

    def replay_batch(partition: int, batch: RecordBatch) -> None:
        for key, value in zip(batch.keys, batch.values, strict=True):
            if key is not None and not batch.header.is_control:
                replay(partition, key, value)

    return replay_batch


async def _load(loaded: _Loaded, writer: FencedOffsetsWriter, bootstrap: list[str], partition: int, epoch: int) -> bool:
    """Fence the previous owner, then replay the partition up to the fence (loadGroupsAndOffsets)."""
    loaded.begin(partition, epoch)
    writer.own(partition, epoch)
    try:
        fence = await writer.append_at(partition, [(loaded.fence_key, None)])
        tp = TopicPartition(writer.topic, partition)
        records = 0
        async with Consumer(bootstrap, auto_offset_reset="earliest", connections=writer.connections) as consumer:
            consumer.control_batches = True  # transactions' markers decide their offsets (group_replay.py)
            consumer.assign([tp])
            await consumer.seek_to_beginning([tp])
            deadline = time.monotonic() + LOAD_TIMEOUT_S
            while await consumer.position(tp) <= fence:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{writer.topic}-{partition} did not load in {LOAD_TIMEOUT_S} s")
                for fetched in (await consumer.poll_batches(500)).values():
                    for batch in fetched.batches:
                        if fetched.start_offset <= batch.header.base_offset < fence:
                            loaded.replay(partition, batch)
                            records += len(batch)
        loaded.finish(partition, fence + 1)
        log.info(
            "coordinator_partition_replayed", topic=writer.topic, partition=partition, records=records, epoch=epoch
        )
        return True
    except Exception as error:
        log.warning("coordinator_partition_load_failed", topic=writer.topic, partition=partition, error=str(error))
        loaded.unload(partition)
        writer.disown(partition)
        return False


def _producer_ids(bootstrap: list[str], connections: Connections) -> Callable[[], Coroutine[Any, Any, int]]:
    """New producer ids for transactional producers, from the brokers' etcd blocks (any broker)."""
    endpoints = itertools.cycle(bootstrap)

    async def new_producer_id() -> int:
        last = "no broker answered"
        for _ in range(len(bootstrap) * 3):
            endpoint = next(endpoints)
            try:
                answer = await connections.broker(endpoint).InitProducerId(
                    broker_pb2.InitProducerIdRequest(), timeout=PRODUCER_ID_TIMEOUT_S
                )
            except (grpc.aio.AioRpcError, ConnectionError) as error:
                last = repr(error)
                continue
            if answer.error_code == 0:
                return int(answer.producer_id)
            last = answer.error_message
        raise RemoteError(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"no producer id: {last}")

    return new_producer_id


class _Coordinator:
    """The coordinator's parts of the shared service sequence (tidelog.server_common.runtime.run_service)."""

    def __init__(self, args: argparse.Namespace, etcd: Etcd3Client, bootstrap: list[str]) -> None:
        self.etcd = etcd
        self.bootstrap = bootstrap
        self.connections = Connections(args.security)
        self.service_security = ServiceSecurity(args.security, etcd)
        self.access = self.service_security.access
        metadata = ClusterMetadata(bootstrap, self.connections)
        writer = FencedOffsetsWriter(metadata, self.connections)
        settings: CoordinatorSettings = args.settings
        coordinator = GroupCoordinator(writer, settings)
        coordinator_metrics.register(coordinator)
        txn_writer = FencedOffsetsWriter(
            metadata, self.connections, topic=TRANSACTION_STATE_TOPIC, producer_id_base=TXN_STATE_PRODUCER_ID_BASE
        )
        transactions = TxnCoordinator(
            txn_writer,
            TxnMarkerWriter(ClusterMetadata(bootstrap, self.connections), self.connections),
            settings,
            new_producer_id=_producer_ids(bootstrap, self.connections),
        )
        self.txn_offsets = TxnOffsetCommits(coordinator, writer)
        self.tail = OffsetsTail(bootstrap, self.connections, coordinator.replay)

        def groups_loaded(partition: int, next_offset: int) -> None:
            coordinator.finish_loading(partition)
            self.tail.follow(partition, next_offset)

        def groups_unloaded(partition: int) -> None:
            self.tail.forget(partition)
            coordinator.unload(partition)

        groups = _Loaded(
            lambda partition, _: coordinator.begin_loading(partition),
            coordinator.replay,
            groups_loaded,
            groups_unloaded,
            FENCE_KEY,
        )
        txns = _Loaded(
            transactions.begin_loading,
            _records_of(transactions.replay),
            lambda partition, _: transactions.finish_loading(partition),
            transactions.unload,
            txn_key(""),
        )

        def owned(name: str, prefix: str, count: int, loaded: _Loaded, topic_writer: FencedOffsetsWriter) -> OwnedTopic:
            async def lost(partition: int) -> None:
                loaded.unload(partition)
                topic_writer.disown(partition)

            return OwnedTopic(
                name,
                prefix,
                count,
                gained=lambda partition, epoch: _load(loaded, topic_writer, bootstrap, partition, epoch),
                lost=lost,
                broken=topic_writer.broken,
            )

        self.coordinator = coordinator
        self.transactions = transactions
        self.ownership = PartitionOwnership(
            etcd,
            CoordinatorInstanceRecord(args.id, f"{args.advertised_host or args.host}:{args.port}"),
            [
                owned(
                    CONSUMER_OFFSETS_TOPIC,
                    COORDINATOR_PARTITIONS_PREFIX,
                    settings.offsets_topic_num_partitions,
                    groups,
                    writer,
                ),
                owned(
                    TRANSACTION_STATE_TOPIC,
                    TXN_COORDINATOR_PARTITIONS_PREFIX,
                    settings.transaction_state_log_num_partitions,
                    txns,
                    txn_writer,
                ),
            ],
            ttl_s=max(1, settings.coordinator_session_timeout_ms // 1000),
        )
        self.tasks: list[asyncio.Task[None]] = []

    def add_to(self, server: grpc.aio.Server) -> list[str]:
        service = CoordinatorService(self.coordinator, self.ownership, self.connections, self.txn_offsets, self.access)
        coordinator_pb2_grpc.add_CoordinatorServicer_to_server(service, server)
        transaction_pb2_grpc.add_TransactionCoordinatorServicer_to_server(
            TxnService(self.transactions, self.access, ownership=self.ownership, connections=self.connections), server
        )
        return ["tidelog.v1.Coordinator", "tidelog.v1.TransactionCoordinator"]

    async def start(self) -> None:

        async def ticking() -> None:
            while True:
                await asyncio.sleep(TICK_S)
                try:
                    await self.coordinator.tick()
                    await self.transactions.tick()
                except Exception:
                    log.exception("coordinator_tick_failed")

        self.tasks = [
            asyncio.create_task(self.tail.run()),
            asyncio.create_task(self.ownership.run()),
            asyncio.create_task(ticking()),
        ]
        log.info("coordinator_brokers", brokers=self.bootstrap)

    async def drain(self) -> None:
        pass  # groups move with the partitions' ownership (leave)

    async def leave(self) -> None:
        for task in self.tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.ownership.close()  # the lease goes: other instances take the partitions at once

    async def close(self) -> None:
        await self.connections.close()
        await self.etcd.close()


async def serve(args: argparse.Namespace) -> None:
    async def build(stopping: asyncio.Event) -> _Coordinator:
        etcd = etcd_client(args.etcd, args.security)
        await etcd.connect()
        bootstrap = await registered_brokers(etcd)
        settings: CoordinatorSettings = args.settings
        await _ensure_offsets_topic(
            bootstrap,
            settings.offsets_topic_num_partitions,
            settings.offsets_topic_replication_factor,
            security=args.security,
        )
        await _ensure_offsets_topic(
            bootstrap,
            settings.transaction_state_log_num_partitions,
            settings.transaction_state_log_replication_factor,
            security=args.security,
            topic=TRANSACTION_STATE_TOPIC,
        )
        return _Coordinator(args, etcd, bootstrap)

    await run_service(
        "coordinator",
        listen=f"{args.host}:{args.port}",
        metrics_port=args.metrics_port,
        build=build,
        grace_s=1.0,
        security=args.security,
        coordinator_id=args.id,
    )


def main(argv: list[str] | None = None) -> None:
    run_process(serve(parse_args(argv)))


if __name__ == "__main__":
    main()
