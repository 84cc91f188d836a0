"""The active controller's copy of the cluster metadata, and its only way to change it.

Loaded from etcd at one revision when a controller is elected (the seeds' controller failover:
rebuild everything from the store); changed only through fenced transactions. Each write is
fenced by the election key's create revision and compares the mod revision of every record it
replaces, so two controllers can never both win, and a deposed one fails its first write: the
role then moves to DEPOSED and the term ends (the next one reloads everything).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from typing import Any, Final

import structlog
from etcd3aio import Etcd3Client, prefix_range_end
from etcd3aio._protobuf import Compare
from etcd3aio.kv import KVService

from tidelog.common.errors import NotControllerError
from tidelog.controller.cluster_state import ClusterState, Versioned
from tidelog.controller.controller_role import ControllerRole, Role
from tidelog.server_common import metrics_catalog
from tidelog.server_common.etcd.compare import compare_mod_revision
from tidelog.server_common.etcd.election import Election
from tidelog.server_common.metadata import (
    BROKERS_PREFIX,
    CONTROLLER_EPOCH_KEY,
    TOPICS_PREFIX,
    BrokerRegistration,
    ControllerRecord,
    PartitionStateRecord,
    TopicRecord,
    parse_topics_key,
    partition_state_key,
    topic_key,
)

__all__ = ["ConflictError", "FencedError", "MetadataStore"]

log = structlog.get_logger(__name__)

STATES_PER_TXN: Final = 100  # etcd's default --max-txn-ops is 128
TXNS_IN_FLIGHT: Final = 32  # transactions of one write_states sent to etcd at once (docs/configuration.md)
LEADER_ELECTIONS: Final = metrics_catalog.counter("kafka_controller_controllerstats_leaderelections_total")
UNCLEAN_ELECTIONS: Final = metrics_catalog.counter("kafka_controller_controllerstats_uncleanleaderelections_total")


class FencedError(Exception):
    """A fenced write failed: this controller is no longer the active one."""


class ConflictError(NotControllerError):
    """A fenced write did not apply; callers see NOT_CONTROLLER and retry at the next controller."""


class MetadataStore:
    def __init__(self, etcd: Etcd3Client, role: ControllerRole) -> None:
        self.etcd = etcd
        self.role = role
        self.state = ClusterState()
        self.election: Election | None = None  # set while this instance leads

    @property
    def kv(self) -> KVService:
        assert self.etcd.kv is not None
        return self.etcd.kv

    async def _failed_compares(self, compares: list[Any]) -> list[str]:
        """Which of a refused transaction's compares do not hold now (etcd does not say): for the
        log, so a step-down names its cause (lost election key, or a record changed elsewhere)."""
        failed = []
        for compare in compares:
            with contextlib.suppress(Exception):
                found = (await self.kv.get(compare.key)).kvs
                held = found[0] if found else None
                field = {Compare.CREATE: "create_revision", Compare.MOD: "mod_revision", Compare.VERSION: "version"}
                name = field.get(compare.target)
                if name is None:
                    continue
                actual = int(getattr(held, name)) if held is not None else 0
                if actual != int(getattr(compare, name)):
                    failed.append(f"{compare.key.decode()}: {name} {actual}, expected {getattr(compare, name)}")
        return failed

    async def bump_epoch(self, election: Election, controller_id: int, endpoint: str) -> int:
        """Claim the next controller epoch (fenced by the election) and proclaim it."""
        current = await self.kv.get(CONTROLLER_EPOCH_KEY)
        if current.kvs:
            previous = ControllerRecord.from_json(current.kvs[0].value).epoch
            unchanged = KVService.txn_compare_version(CONTROLLER_EPOCH_KEY, int(current.kvs[0].version))
        else:
            previous = 0
            unchanged = KVService.txn_compare_create_revision(CONTROLLER_EPOCH_KEY, 0)
        record = ControllerRecord(controller_id, previous + 1, endpoint)
        response = await self.kv.txn(
            compare=[election.fence(), unchanged],
            success=[KVService.txn_op_put(CONTROLLER_EPOCH_KEY, record.to_json())],
        )
        if not response.succeeded:
            raise FencedError("could not claim the next controller epoch")
        await election.proclaim(record.to_json())
        return record.epoch

    async def load(self) -> int:
        """Brokers, topics and partition states at one revision; returns that revision."""
        response = await self.kv.txn(
            compare=[],
            success=[
                KVService.txn_op_get(BROKERS_PREFIX, range_end=prefix_range_end(BROKERS_PREFIX.encode())),
                KVService.txn_op_get(TOPICS_PREFIX, range_end=prefix_range_end(TOPICS_PREFIX.encode())),
            ],
        )
        state = ClusterState()
        for kv in response.responses[0].response_range.kvs:
            broker = BrokerRegistration.from_json(kv.value)
            state.brokers[broker.broker_id] = broker
        partition_kvs = []
        for kv in response.responses[1].response_range.kvs:
            topic, partition = parse_topics_key(kv.key.decode())
            if partition is None:
                state.topics[topic] = Versioned(TopicRecord.from_json(kv.value), int(kv.mod_revision))
            else:
                partition_kvs.append(((topic, partition), kv))
        records = PartitionStateRecord.many_from_json([kv.value for _, kv in partition_kvs])
        for ((topic, partition), kv), record in zip(partition_kvs, records, strict=True):
            state.partitions[(topic, partition)] = Versioned(record, int(kv.mod_revision))
        self.state = state
        return int(response.header.revision)

    async def exists(self, key: str) -> bool:
        return bool((await self.kv.get(key)).kvs)

    async def commit(self, compares: list[Any], puts: dict[str, bytes], deletes: Iterable[str] = ()) -> int:
        """One fenced etcd transaction; returns its revision. ConflictError when it did not apply."""
        assert self.election is not None, "only a leading controller writes"
        operations = [KVService.txn_op_put(key, value) for key, value in puts.items()]
        for key in deletes:
            if key.endswith("/"):
                operations.append(KVService.txn_op_delete(key, range_end=prefix_range_end(key.encode())))
            else:
                operations.append(KVService.txn_op_delete(key))
        response = await self.kv.txn(compare=[self.election.fence(), *compares], success=operations)
        if not response.succeeded:
            # Fenced out, or etcd holds something our copy does not: either way this term is over;
            # the next one (here or elsewhere) reloads everything from etcd.
            failed = await self._failed_compares([self.election.fence(), *compares])
            log.warning("metadata_write_refused", failed=failed)
            self.role.move(Role.DEPOSED, reason="a fenced metadata write did not apply")
            raise ConflictError("a fenced metadata write did not apply; the controller steps down")
        return int(response.header.revision)

    async def write_states(self, states: dict[tuple[str, int], PartitionStateRecord]) -> None:
        """Write partition states (chunked), each compared against the version we hold. The chunks
        go to etcd side by side, up to TXNS_IN_FLIGHT at once: etcd commits concurrent proposals
        in one raft entry and one fsync, where one after another paid a round and an fsync each
        (10,000 states: 100 transactions, 1-2 s of a controlled shutdown or a restart's ISR
        expansion). A failed chunk fails the write once every chunk has ended; which chunks
        applied is what etcd holds, and the next term reloads it (as a failure half-way did)."""
        items = sorted(states.items())
        in_flight = asyncio.Semaphore(TXNS_IN_FLIGHT)
        outcomes = await asyncio.gather(
            *(
                self._write_chunk(items[start : start + STATES_PER_TXN], in_flight)
                for start in range(0, len(items), STATES_PER_TXN)
            ),
            return_exceptions=True,
        )
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome

    async def _write_chunk(
        self, chunk: list[tuple[tuple[str, int], PartitionStateRecord]], in_flight: asyncio.Semaphore
    ) -> None:
        async with in_flight:
            if self.role.current is Role.DEPOSED:  # another chunk of this write was refused: stop here
                raise ConflictError("the controller stepped down during the write")
            compares = []
            for (topic, partition), _ in chunk:
                held = self.state.partitions.get((topic, partition))
                key = partition_state_key(topic, partition)
                if held is None:
                    compares.append(KVService.txn_compare_create_revision(key, 0))
                else:
                    compares.append(compare_mod_revision(key, held.mod_revision))
            puts = {partition_state_key(topic, partition): state.to_json() for (topic, partition), state in chunk}
            revision = await self.commit(compares, puts)
        for topic_partition, state in chunk:
            _count_election(self.state.partitions.get(topic_partition), state)
            self.state.partitions[topic_partition] = Versioned(state, revision)

    async def commit_topic(
        self, topic: str, record: TopicRecord, states: dict[tuple[str, int], PartitionStateRecord] | None = None
    ) -> None:
        """The topic record and some of its partition states in one fenced, compared transaction."""
        states = states or {}
        held = self.state.topics[topic]
        compares = [compare_mod_revision(topic_key(topic), held.mod_revision)]
        compares += [
            compare_mod_revision(partition_state_key(*key), self.state.partitions[key].mod_revision) for key in states
        ]
        puts = {topic_key(topic): record.to_json()}
        puts.update({partition_state_key(*key): state.to_json() for key, state in states.items()})
        revision = await self.commit(compares, puts)
        self.state.topics[topic] = Versioned(record, revision)
        for key, state in states.items():
            _count_election(self.state.partitions.get(key), state)
            self.state.partitions[key] = Versioned(state, revision)


def _count_election(held: Versioned[PartitionStateRecord] | None, state: PartitionStateRecord) -> None:
    """A committed state that gives the partition a new leader is an election (Kafka's
    LeaderElectionRateAndTimeMs); one from outside the old ISR is unclean."""
    if state.leader == -1 or (held is not None and held.value.leader == state.leader):
        return
    LEADER_ELECTIONS.inc()
    if held is not None and state.leader not in held.value.isr:
        UNCLEAN_ELECTIONS.inc()
