"""The controller: one active instance, elected through etcd, owns all partition leadership.

Every controller process runs `Controller.run()`: it opens an etcd session, campaigns, and while
elected (until its session ends or a fenced write fails) it
1. bumps the controller epoch (a fenced transaction),
2. loads brokers, topics and partition states at one etcd revision (the seeds' controller
   failover: rebuild everything from the store),
3. elects leaders for partitions whose leader is gone and sends every live broker its full
   LeaderAndIsr and an UpdateMetadata ("resend leadership"),
4. then serves admin requests and broker changes one at a time under `self._mutex`.

Every etcd write is a transaction fenced by the election key's create revision and compares the
mod revision of each record it replaces: two controllers can never both win, and a deposed one
steps down at its first write. Brokers refuse requests carrying an older controller epoch.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import random
import uuid
from collections.abc import Callable, Iterable
from typing import Any, Final

import structlog
from etcd3aio import Etcd3Client, prefix_range_end
from etcd3aio.kv import KVService

from tidelog.common.config import LOG_CONFIGS, parse_configs
from tidelog.common.errors import (
    ErrorCode,
    InvalidPartitionsError,
    InvalidRequestError,
    NoReassignmentInProgressError,
    NotControllerError,
    ReassignmentInProgressError,
    RemoteError,
    TidelogError,
    TopicAlreadyExistsError,
    TopicDeletionDisabledError,
    UnknownTopicOrPartitionError,
)
from tidelog.common.etcd.compare import compare_mod_revision
from tidelog.common.etcd.election import Election, NotLeaderError
from tidelog.common.etcd.session import Session
from tidelog.common.metadata import (
    BROKERS_PREFIX,
    CONTROLLER_ELECTION_PREFIX,
    CONTROLLER_EPOCH_KEY,
    TOPICS_PREFIX,
    BrokerRegistration,
    ControllerRecord,
    PartitionStateRecord,
    TopicRecord,
    parse_topics_key,
    partition_state_key,
    topic_key,
    validate_topic_name,
)
from tidelog.controller import reassignment
from tidelog.controller.assignment import assign_replicas, rack_alternated
from tidelog.controller.broker_requests import BrokerRequests
from tidelog.controller.cluster_state import ClusterState, Versioned
from tidelog.controller.controller_config import ControllerConfig
from tidelog.controller.controller_role import ControllerRole, Role
from tidelog.controller.leader_balance import imbalanced_partitions, preferred_state, unclean_state
from tidelog.v1 import common_pb2, controller_pb2

__all__ = ["Controller"]

log = structlog.get_logger(__name__)

EVENT_PUT: Final = 0
STATES_PER_TXN: Final = 100  # etcd's default --max-txn-ops is 128
TOPICS_PER_REQUEST_MAX: Final = 1000
PARTITIONS_PER_TOPIC_MAX: Final = 10_000
CAMPAIGN_RETRY_S: Final = 0.5
RESYNC_INTERVAL_S: Final = 1.0


class FencedError(Exception):
    """A fenced write failed: this controller is no longer the active one."""


class ConflictError(NotControllerError):
    """A fenced write did not apply; callers see NOT_CONTROLLER and retry at the next controller."""


class Controller:
    def __init__(
        self,
        config: ControllerConfig,
        etcd: Etcd3Client,
        *,
        broker_requests: BrokerRequests | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.config = config
        self.etcd = etcd
        self.broker_requests = broker_requests or BrokerRequests(
            timeout_s=config.settings.controller_socket_timeout_ms / 1000
        )
        self.rng = rng or random.Random()
        self.state = ClusterState()
        self.role = ControllerRole(config.controller_id)
        self.active = self.role.active  # set exactly while the role is ACTIVE
        self._election: Election | None = None
        self._mutex = asyncio.Lock()
        # Pushes to one broker run one at a time, each with the state as it is when it starts: a
        # broker never receives an older whole state after a newer one (full LeaderAndIsr stops
        # replicas it does not list, so an old one arriving late would stop a new partition).
        # Each broker has its own queue, so a stalled broker delays only its own updates.
        self._push_locks: dict[int, asyncio.Lock] = {}
        self._queued_push: dict[int, asyncio.Future[None]] = {}
        self._background: set[asyncio.Task[None]] = set()
        self._unsynced: set[int] = set()  # live brokers the last whole-state push did not reach
        self._shutting_down: set[int] = set()  # brokers in controlled shutdown: never elected again
        # A preferred replica rejoined an ISR while another broker leads: check the balance now
        # rather than at the next interval (after a few failovers every leadership can sit on one
        # broker, whose next failure would then stop every partition at once).
        self._preferred_returned = asyncio.Event()

    @property
    def epoch(self) -> int:
        """The controller epoch of this instance's current (or last) leadership; -1 before any."""
        return self.role.epoch

    @property
    def kv(self) -> KVService:
        assert self.etcd.kv is not None
        return self.etcd.kv

    # ---- election loop ---------------------------------------------------------------------

    async def run(self) -> None:
        """Campaign, lead while elected, campaign again; until `stop()`."""
        while not self.role.stopping.is_set():
            self.role.move(Role.CANDIDATE, reason="campaigning")
            session = await Session(self.etcd, ttl_s=self.config.session_ttl_s).start()
            election = Election(session, CONTROLLER_ELECTION_PREFIX)
            try:
                record = ControllerRecord(self.config.controller_id, -1, self.config.endpoint)
                await self._until_stopping(election.campaign(record.to_json()))
                if self.role.stopping.is_set():
                    break
                self.role.move(Role.LOADING, reason="elected")
                self._election = election
                await self._lead(election, session)
                self.role.move(Role.DEPOSED, reason="session lost")
            except (NotLeaderError, FencedError, ConflictError) as error:
                log.warning("controller_deposed", controller=self.config.controller_id, reason=str(error))
                self.role.move(Role.DEPOSED, reason=str(error))
            finally:
                self._election = None
                with contextlib.suppress(Exception):
                    await election.resign()
                await session.close()
            if not self.role.stopping.is_set():
                await asyncio.sleep(CAMPAIGN_RETRY_S)

    async def _until_stopping(self, work: Any) -> None:
        task = asyncio.ensure_future(work)
        stopping = asyncio.ensure_future(self.role.stopping.wait())
        done, _ = await asyncio.wait({task, stopping}, return_when=asyncio.FIRST_COMPLETED)
        for pending in (task, stopping):
            if pending not in done:
                pending.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await pending
        if task in done:
            task.result()

    async def stop(self) -> None:
        self.role.move(Role.STOPPING, reason="stop requested")

    async def _lead(self, election: Election, session: Session) -> None:
        async with self._mutex:
            self.role.lead_under(await self._bump_epoch(election))
            revision = await self._load()
            log.info(
                "controller_elected",
                controller=self.config.controller_id,
                epoch=self.epoch,
                brokers=sorted(self.state.brokers),
                topics=len(self.state.topics),
            )
            await self._initialise_missing_states()
            await self._elect_leaders(lambda state: state.leader not in self.state.brokers)
            await self._advance_reassignments()  # a move the previous controller left under way
            if not self.role.move(Role.ACTIVE, reason=f"epoch {self.epoch}"):
                return  # stopping meanwhile
        await self.propagate(self.state.brokers)
        watcher = asyncio.create_task(self._watch_brokers(revision + 1))
        resync = asyncio.create_task(self._resync())
        rebalance = asyncio.create_task(self._rebalance_leaders())
        try:
            await self._until_stopping(self._first_of(session.done.wait(), self.role.deposed.wait(), watcher))
        finally:
            for task in (watcher, resync, rebalance, *self._background):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task

    @staticmethod
    async def _first_of(*waits: Any) -> None:
        tasks = [asyncio.ensure_future(wait) for wait in waits]
        done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
        for task in done:
            task.result()

    # ---- loading ---------------------------------------------------------------------------

    async def _bump_epoch(self, election: Election) -> int:
        current = await self.kv.get(CONTROLLER_EPOCH_KEY)
        if current.kvs:
            previous = ControllerRecord.from_json(current.kvs[0].value).epoch
            unchanged = KVService.txn_compare_version(CONTROLLER_EPOCH_KEY, int(current.kvs[0].version))
        else:
            previous = 0
            unchanged = KVService.txn_compare_create_revision(CONTROLLER_EPOCH_KEY, 0)
        record = ControllerRecord(self.config.controller_id, previous + 1, self.config.endpoint)
        response = await self.kv.txn(
            compare=[election.fence(), unchanged],
            success=[KVService.txn_op_put(CONTROLLER_EPOCH_KEY, record.to_json())],
        )
        if not response.succeeded:
            raise FencedError("could not claim the next controller epoch")
        await election.proclaim(record.to_json())
        return record.epoch

    async def _load(self) -> int:
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
        for kv in response.responses[1].response_range.kvs:
            topic, partition = parse_topics_key(kv.key.decode())
            if partition is None:
                state.topics[topic] = Versioned(TopicRecord.from_json(kv.value), int(kv.mod_revision))
            else:
                state.partitions[(topic, partition)] = Versioned(
                    PartitionStateRecord.from_json(kv.value), int(kv.mod_revision)
                )
        self.state = state
        return int(response.header.revision)

    # ---- committing ------------------------------------------------------------------------

    async def _commit(self, compares: list[Any], puts: dict[str, bytes], deletes: Iterable[str] = ()) -> int:
        """One fenced etcd transaction; returns its revision. FencedError when it did not apply."""
        assert self._election is not None
        operations = [KVService.txn_op_put(key, value) for key, value in puts.items()]
        for key in deletes:
            if key.endswith("/"):
                operations.append(KVService.txn_op_delete(key, range_end=prefix_range_end(key.encode())))
            else:
                operations.append(KVService.txn_op_delete(key))
        response = await self.kv.txn(compare=[self._election.fence(), *compares], success=operations)
        if not response.succeeded:
            # Fenced out, or etcd holds something our copy does not: either way this term is over;
            # the next one (here or elsewhere) reloads everything from etcd.
            self.role.move(Role.DEPOSED, reason="a fenced metadata write did not apply")
            raise ConflictError("a fenced metadata write did not apply; the controller steps down")
        return int(response.header.revision)

    async def _write_states(self, states: dict[tuple[str, int], PartitionStateRecord]) -> None:
        """Write partition states (chunked), each compared against the version we hold."""
        items = sorted(states.items())
        for start in range(0, len(items), STATES_PER_TXN):
            chunk = items[start : start + STATES_PER_TXN]
            compares = []
            for (topic, partition), _ in chunk:
                held = self.state.partitions.get((topic, partition))
                key = partition_state_key(topic, partition)
                if held is None:
                    compares.append(KVService.txn_compare_create_revision(key, 0))
                else:
                    compares.append(compare_mod_revision(key, held.mod_revision))
            puts = {partition_state_key(topic, partition): state.to_json() for (topic, partition), state in chunk}
            revision = await self._commit(compares, puts)
            for topic_partition, state in chunk:
                self.state.partitions[topic_partition] = Versioned(state, revision)

    # ---- leadership ------------------------------------------------------------------------

    def _initial_state(self, replicas: list[int]) -> PartitionStateRecord:
        live = [broker for broker in replicas if broker in self.state.brokers]
        return PartitionStateRecord(
            leader=live[0] if live else -1,
            isr=list(replicas),
            leader_epoch=0,
            partition_epoch=0,
            controller_epoch=self.epoch,
        )

    async def _initialise_missing_states(self) -> None:
        """Partition states a crashed controller did not write yet (the topic record is the commit)."""
        missing = {
            (topic, partition): self._initial_state(versioned.value.replicas(partition))
            for topic, versioned in self.state.topics.items()
            for partition in self.state.topic_partitions(topic)
            if (topic, partition) not in self.state.partitions
        }
        if missing:
            await self._write_states(missing)

    def _next_state(
        self, topic: str, partition: int, state: PartitionStateRecord, fenced: frozenset[int] = frozenset()
    ) -> PartitionStateRecord | None:
        """The state after electing from the live ISR (the preferred replica first), or None if unchanged."""
        # `fenced`: brokers that left or came back as a new process; their old replica state is gone.
        live = {broker for broker in self.state.brokers if broker not in fenced and broker not in self._shutting_down}
        replicas = self.state.topics[topic].value.replicas(partition)
        live_isr = [broker for broker in state.isr if broker in live]
        candidates = [broker for broker in replicas if broker in live_isr]
        if state.leader in live and state.leader in live_isr:
            leader = state.leader
        else:
            leader = candidates[0] if candidates else -1
        # The dead leave the ISR, except the last member: it must stay to be elected on return.
        isr = live_isr if live_isr else list(state.isr[:1] if state.leader == -1 else [state.leader])
        if leader == -1 and self._unclean_allowed(topic):
            out_of_sync = [broker for broker in replicas if broker in live]
            if out_of_sync:  # availability over durability, as the topic asked: records may be lost
                leader, isr = out_of_sync[0], [out_of_sync[0]]
                log.warning("unclean_leader_elected", topic=topic, partition=partition, leader=leader)
        if leader == state.leader and isr == state.isr:
            return None
        return state.changed(leader=leader, isr=isr, controller_epoch=self.epoch)

    def _unclean_allowed(self, topic: str) -> bool:
        configs = parse_configs(self.state.topics[topic].value.configs, LOG_CONFIGS)
        return bool(configs["unclean.leader.election.enable"])

    async def _elect_leaders(
        self, needs: Callable[[PartitionStateRecord], bool], fenced: frozenset[int] = frozenset()
    ) -> set[int]:
        """Re-elect where `needs(state)`; returns the brokers whose replicas changed."""
        changes: dict[tuple[str, int], PartitionStateRecord] = {}
        for (topic, partition), versioned in self.state.partitions.items():
            state = versioned.value
            if topic not in self.state.topics or not needs(state):
                continue
            next_state = self._next_state(topic, partition, state, fenced)
            if next_state is not None:
                changes[(topic, partition)] = next_state
        if changes:
            offline = sum(1 for state in changes.values() if state.leader == -1)
            log.info("leaders_elected", partitions=len(changes), offline=offline)
            await self._write_states(changes)
        return {broker for topic, partition in changes for broker in self.state.topics[topic].value.replicas(partition)}

    # ---- broker changes --------------------------------------------------------------------

    async def _watch_brokers(self, start_revision: int) -> None:
        assert self.etcd.watch is not None
        range_end = prefix_range_end(BROKERS_PREFIX.encode())
        async for response in self.etcd.watch.watch(BROKERS_PREFIX, range_end, start_revision=start_revision):
            if not response.events:
                continue  # the watch's creation or progress notice
            added: set[int] = set()
            removed: set[int] = set()
            async with self._mutex:
                for event in response.events:
                    broker_id = int(event.kv.key.decode().rsplit("/", 1)[1])
                    if event.type == EVENT_PUT:
                        registration = BrokerRegistration.from_json(event.kv.value)
                        previous = self.state.brokers.get(broker_id)
                        if previous is not None and previous.incarnation != registration.incarnation:
                            removed.add(broker_id)  # a new life: out of every ISR, as if it had left
                            self._shutting_down.discard(broker_id)
                        else:
                            removed.discard(broker_id)
                        self.state.brokers[broker_id] = registration
                        added.add(broker_id)
                    else:
                        self.state.brokers.pop(broker_id, None)
                        self._shutting_down.discard(broker_id)
                        removed.add(broker_id)
                        added.discard(broker_id)
                log.info(
                    "brokers_changed", added=sorted(added), removed=sorted(removed), live=sorted(self.state.brokers)
                )
                # As if the removed (and re-registered) brokers left: out of the ISRs, leaders elsewhere ...
                await self._elect_leaders(_affected_by(frozenset(removed)), fenced=frozenset(removed))
                # ... then as if the re-registered ones returned: they lead what only they can lead.
                await self._elect_leaders(lambda state: state.leader == -1)
                await self._advance_reassignments()
            self.propagate_soon(self.state.brokers)  # the next change is handled without waiting

    # ---- propagation -----------------------------------------------------------------------

    async def propagate(self, brokers: Iterable[int]) -> None:
        """Push full LeaderAndIsr and UpdateMetadata to `brokers` (idempotent, newest wins)."""
        await asyncio.gather(*(self._push(broker_id) for broker_id in set(brokers)))

    def propagate_soon(self, brokers: Iterable[int]) -> None:
        """`propagate` in the background: for callers that must not wait on a slow broker."""
        task = asyncio.create_task(self.propagate(list(brokers)))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _push(self, broker_id: int) -> None:
        queued = self._queued_push.get(broker_id)
        if queued is not None:
            # A push not yet started will carry the state as of its start: newer than ours.
            await asyncio.shield(queued)
            return
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queued_push[broker_id] = done
        try:
            async with self._push_locks.setdefault(broker_id, asyncio.Lock()):
                if self._queued_push.get(broker_id) is done:
                    del self._queued_push[broker_id]  # later changes need a push of their own
                reached = await self.broker_requests.send_state(
                    self.state, self.config.controller_id, self.epoch, self.config.endpoint, broker_id
                )
                if reached:
                    self._unsynced.discard(broker_id)
                else:
                    self._unsynced.add(broker_id)
        finally:
            if self._queued_push.get(broker_id) is done:
                del self._queued_push[broker_id]
            done.set_result(None)

    async def _resync(self) -> None:
        """Push whole state again, every second, to live brokers a push did not reach."""
        while True:
            await asyncio.sleep(RESYNC_INTERVAL_S)
            stale = {broker for broker in self._unsynced if broker in self.state.brokers}
            self._unsynced &= stale
            if stale and self.role.is_active:
                await self.propagate(stale)

    # ---- admin requests (called by the admin service) --------------------------------------

    def _require_active(self) -> None:
        if not self.role.is_active:
            raise NotControllerError(f"controller {self.config.controller_id} is not the active controller")

    async def active_endpoint(self) -> str:
        """host:port of the active controller, or "" when none is elected."""
        if self.active.is_set():
            return self.config.endpoint
        response = await self.kv.get(
            CONTROLLER_ELECTION_PREFIX + "/",
            prefix_range_end((CONTROLLER_ELECTION_PREFIX + "/").encode()),
        )
        if not response.kvs:
            return ""
        oldest = min(response.kvs, key=lambda kv: kv.create_revision)
        return ControllerRecord.from_json(oldest.value).endpoint

    async def create_topics(self, request: controller_pb2.CreateTopicsRequest) -> list[controller_pb2.TopicResult]:
        if len(request.topics) > TOPICS_PER_REQUEST_MAX:
            raise InvalidRequestError(f"at most {TOPICS_PER_REQUEST_MAX} topics per request")
        results = []
        created: list[str] = []
        async with self._mutex:
            self._require_active()
            for new_topic in request.topics:
                try:
                    await self._create_topic(new_topic, request.validate_only)
                    results.append(controller_pb2.TopicResult(name=new_topic.name))
                    created.append(new_topic.name)
                except TidelogError as error:
                    results.append(_error_result(new_topic.name, error))
        if created and not request.validate_only:
            await self.propagate(self.state.brokers)
        return results

    async def _create_topic(self, new_topic: controller_pb2.NewTopic, validate_only: bool) -> None:
        validate_topic_name(new_topic.name)
        partitions = new_topic.num_partitions if new_topic.num_partitions != -1 else self.config.settings.num_partitions
        factor = (
            new_topic.replication_factor
            if new_topic.replication_factor != -1
            else self.config.settings.default_replication_factor
        )
        if partitions > PARTITIONS_PER_TOPIC_MAX:
            raise InvalidPartitionsError(f"at most {PARTITIONS_PER_TOPIC_MAX} partitions per topic")
        parse_configs(dict(new_topic.configs), LOG_CONFIGS)
        if new_topic.name in self.state.topics:
            raise TopicAlreadyExistsError(f"topic {new_topic.name!r} already exists")
        racks = {broker_id: broker.rack for broker_id, broker in self.state.brokers.items()}
        assignment = assign_replicas(racks, partitions, factor, start=self.rng.randrange(max(len(racks), 1)))
        if validate_only:
            return
        record = TopicRecord(
            topic_id=uuid.uuid4().hex,
            assignment={str(partition): replicas for partition, replicas in assignment.items()},
            configs=dict(new_topic.configs),
        )
        key = topic_key(new_topic.name)
        if await self._topic_exists_in_store(key):  # e.g. written by a controller we replaced mid-way
            raise TopicAlreadyExistsError(f"topic {new_topic.name!r} already exists")
        revision = await self._commit([KVService.txn_compare_create_revision(key, 0)], {key: record.to_json()})
        self.state.topics[new_topic.name] = Versioned(record, revision)
        await self._write_states(
            {(new_topic.name, partition): self._initial_state(replicas) for partition, replicas in assignment.items()}
        )
        log.info("topic_created", topic=new_topic.name, partitions=partitions, replication_factor=factor)

    async def _topic_exists_in_store(self, key: str) -> bool:
        return bool((await self.kv.get(key)).kvs)

    async def delete_topics(self, request: controller_pb2.DeleteTopicsRequest) -> list[controller_pb2.TopicResult]:
        results = []
        stopped: list[common_pb2.PartitionState] = []
        async with self._mutex:
            self._require_active()
            for name in request.names:
                try:
                    if not self.config.settings.delete_topic_enable:
                        raise TopicDeletionDisabledError("topic deletion is disabled (delete.topic.enable=false)")
                    if name not in self.state.topics:
                        raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
                    held = self.state.topics[name]
                    stopped.extend(self.state.partition_proto(name, p) for p in self.state.topic_partitions(name))
                    await self._commit(
                        [compare_mod_revision(topic_key(name), held.mod_revision)],
                        {},
                        [topic_key(name), f"{topic_key(name)}/"],
                    )
                    del self.state.topics[name]
                    for key in [key for key in self.state.partitions if key[0] == name]:
                        del self.state.partitions[key]
                    results.append(controller_pb2.TopicResult(name=name))
                    log.info("topic_deleted", topic=name)
                except TidelogError as error:
                    results.append(_error_result(name, error))
        if stopped:
            await self.broker_requests.stop_replicas(
                stopped, self.config.controller_id, self.epoch, self.state.brokers, delete=True
            )
            await self.propagate(self.state.brokers)
        return results

    async def create_partitions(
        self, request: controller_pb2.CreatePartitionsRequest
    ) -> list[controller_pb2.TopicResult]:
        results = []
        async with self._mutex:
            self._require_active()
            for increase in request.topics:
                try:
                    await self._add_partitions(increase.topic, increase.total_count)
                    results.append(controller_pb2.TopicResult(name=increase.topic))
                except TidelogError as error:
                    results.append(_error_result(increase.topic, error))
        await self.propagate(self.state.brokers)
        return results

    async def _add_partitions(self, topic: str, total: int) -> None:
        if topic not in self.state.topics:
            raise UnknownTopicOrPartitionError(f"topic {topic!r} does not exist")
        held = self.state.topics[topic]
        current = held.value.partition_count
        if total <= current:
            raise InvalidPartitionsError(f"topic {topic!r} has {current} partitions; the new count must be larger")
        if total > PARTITIONS_PER_TOPIC_MAX:
            raise InvalidPartitionsError(f"at most {PARTITIONS_PER_TOPIC_MAX} partitions per topic")
        racks = {broker_id: broker.rack for broker_id, broker in self.state.brokers.items()}
        ordered = rack_alternated(racks) if any(racks.values()) else sorted(racks)
        first = held.value.replicas(0)[0]
        start = ordered.index(first) if first in ordered else self.rng.randrange(max(len(ordered), 1))
        factor = len(held.value.replicas(0))
        added = assign_replicas(racks, total - current, factor, start=start, first_partition=current)
        record = dataclasses.replace(
            held.value,
            assignment={**held.value.assignment, **{str(p): replicas for p, replicas in added.items()}},
        )
        revision = await self._commit(
            [compare_mod_revision(topic_key(topic), held.mod_revision)], {topic_key(topic): record.to_json()}
        )
        self.state.topics[topic] = Versioned(record, revision)
        await self._write_states({(topic, p): self._initial_state(replicas) for p, replicas in added.items()})

    async def alter_configs(self, request: controller_pb2.AlterConfigsRequest) -> list[controller_pb2.TopicResult]:
        results = []
        async with self._mutex:
            self._require_active()
            for change in request.changes:
                try:
                    if change.topic not in self.state.topics:
                        raise UnknownTopicOrPartitionError(f"topic {change.topic!r} does not exist")
                    held = self.state.topics[change.topic]
                    configs = {**held.value.configs, **dict(change.set)}
                    for name in change.delete:
                        configs.pop(name, None)
                    parse_configs(configs, LOG_CONFIGS)
                    record = dataclasses.replace(held.value, configs=configs)
                    revision = await self._commit(
                        [compare_mod_revision(topic_key(change.topic), held.mod_revision)],
                        {topic_key(change.topic): record.to_json()},
                    )
                    self.state.topics[change.topic] = Versioned(record, revision)
                    results.append(controller_pb2.TopicResult(name=change.topic))
                except TidelogError as error:
                    results.append(_error_result(change.topic, error))
        await self.propagate(self.state.brokers)
        return results

    async def alter_partition(
        self, request: controller_pb2.AlterPartitionRequest
    ) -> controller_pb2.AlterPartitionResponse:
        """A leader changes its ISR (KIP-497): only for the exact state it knows, only as leader."""
        async with self._mutex:
            self._require_active()
            key = (request.topic, request.partition)
            held = self.state.partitions.get(key)
            if held is None or request.topic not in self.state.topics:
                return _alter_error(
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{request.topic}-{request.partition} is unknown"
                )
            state = held.value
            current = self.state.partition_proto(*key)
            if request.broker_id != state.leader or request.leader_epoch != state.leader_epoch:
                return _alter_error(ErrorCode.FENCED_LEADER_EPOCH, "not the leader of this epoch", current)
            if request.partition_epoch != state.partition_epoch:
                return _alter_error(ErrorCode.INVALID_UPDATE_VERSION, "the partition state changed", current)
            replicas = self.state.topics[request.topic].value.replicas(request.partition)
            new_isr = [broker for broker in replicas if broker in set(request.new_isr)]
            if state.leader not in new_isr or len(new_isr) != len(set(request.new_isr)):
                return _alter_error(
                    ErrorCode.INELIGIBLE_REPLICA, "the ISR must hold the leader and only replicas", current
                )
            joining = set(new_isr) - set(state.isr)
            if any(broker not in self.state.brokers or broker in self._shutting_down for broker in joining):
                return _alter_error(
                    ErrorCode.INELIGIBLE_REPLICA, "only live brokers not shutting down join the ISR", current
                )
            stale = sorted(
                broker
                for broker in joining
                if request.new_isr_incarnations.get(broker) != self.state.brokers[broker].incarnation
            )
            if stale:  # the leader judged them on fetches of a life that is over (KIP-903)
                return _alter_error(
                    ErrorCode.INELIGIBLE_REPLICA, f"brokers {stale} joined on fetches of an earlier life", current
                )
            next_state = state.changed(isr=new_isr, controller_epoch=self.epoch)
            await self._write_states({key: next_state})
            log.info("isr_changed", topic=request.topic, partition=request.partition, isr=new_isr)
            if replicas and replicas[0] in joining and replicas[0] != state.leader:
                self._preferred_returned.set()
            await self._advance_reassignments([key])  # phase A may just have ended
            committed = self.state.partition_proto(*key)
        # The leader applies the answer itself; the others learn it in the background (a stalled
        # follower must not hold up the answer past the leader's deadline).
        self.propagate_soon(self.state.brokers)
        return controller_pb2.AlterPartitionResponse(state=committed)

    # ---- leader elections on request, and the automatic rebalance --------------------------

    async def elect_leaders(self, request: controller_pb2.ElectLeadersRequest) -> list[controller_pb2.PartitionResult]:
        """Preferred or unclean elections for the partitions asked (all when none are named)."""
        unclean = request.election_type == controller_pb2.UNCLEAN
        async with self._mutex:
            self._require_active()
            keys = [(ref.topic, ref.partition) for ref in request.partitions] or sorted(self.state.partitions)
            results, changes = self._elections(keys, unclean=unclean)
            if changes:
                await self._write_states(changes)
                log.info("leaders_elected_on_request", partitions=len(changes), unclean=unclean)
        if changes:
            await self.propagate(self.state.brokers)
        return results

    def _elections(
        self, keys: list[tuple[str, int]], *, unclean: bool
    ) -> tuple[list[controller_pb2.PartitionResult], dict[tuple[str, int], PartitionStateRecord]]:
        live = set(self.state.brokers) - self._shutting_down
        elect = unclean_state if unclean else preferred_state
        results = []
        changes: dict[tuple[str, int], PartitionStateRecord] = {}
        for topic, partition in keys:
            result = controller_pb2.PartitionResult(topic=topic, partition=partition)
            held = self.state.partitions.get((topic, partition))
            if held is None or topic not in self.state.topics:
                result.error_code = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                result.error_message = f"{topic}-{partition} is unknown"
            else:
                replicas = self.state.topics[topic].value.replicas(partition)
                outcome = elect(replicas, held.value, live, self.epoch)
                if isinstance(outcome, ErrorCode):
                    result.error_code = int(outcome)
                    result.error_message = outcome.name.lower().replace("_", " ")
                else:
                    changes[(topic, partition)] = outcome
            results.append(result)
        return results, changes

    async def _rebalance_leaders(self) -> None:
        """auto.leader.rebalance.enable: preferred elections where imbalanced, every check interval
        and as soon as a preferred replica rejoins an ISR."""
        if not self.config.settings.auto_leader_rebalance_enable:
            return
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    self._preferred_returned.wait(), self.config.settings.leader_imbalance_check_interval_seconds
                )
            self._preferred_returned.clear()
            try:
                async with self._mutex:
                    if not self.role.is_active:
                        continue
                    moving = {
                        (topic, int(partition))
                        for topic, versioned in self.state.topics.items()
                        for partition in versioned.value.original
                    }
                    assignments = {
                        key: self.state.topics[key[0]].value.replicas(key[1])
                        for key in self.state.partitions
                        if key[0] in self.state.topics and key not in moving
                    }
                    states = {key: versioned.value for key, versioned in self.state.partitions.items()}
                    keys = imbalanced_partitions(
                        assignments,
                        states,
                        set(self.state.brokers) - self._shutting_down,
                        self.config.settings.leader_imbalance_per_broker_percentage,
                    )
                    _, changes = self._elections(keys, unclean=False)
                    if changes:
                        await self._write_states(changes)
                        log.info("leaders_rebalanced", partitions=len(changes))
                if changes:
                    await self.propagate(self.state.brokers)
            except (ConflictError, FencedError):
                raise
            except Exception:
                log.exception("leader_rebalance_failed")

    # ---- reassignment (KIP-455; reassignment.py has the phases) -----------------------------

    def _reassignment_of(self, topic: str, partition: int) -> reassignment.Reassignment | None:
        record = self.state.topics[topic].value
        name = str(partition)
        if name not in record.original:
            return None
        return reassignment.Reassignment(
            replicas=record.replicas(partition),
            adding=list(record.adding.get(name, [])),
            removing=list(record.removing.get(name, [])),
            original=list(record.original[name]),
        )

    def ongoing_reassignments(self) -> list[controller_pb2.OngoingReassignment]:
        self._require_active()
        ongoing = []
        for topic in sorted(self.state.topics):
            for partition in self.state.topic_partitions(topic):
                moving = self._reassignment_of(topic, partition)
                if moving is not None:
                    ongoing.append(
                        controller_pb2.OngoingReassignment(
                            topic=topic,
                            partition=partition,
                            replicas=moving.replicas,
                            adding=moving.adding,
                            removing=moving.removing,
                        )
                    )
        return ongoing

    async def alter_reassignments(
        self, request: controller_pb2.AlterPartitionReassignmentsRequest
    ) -> list[controller_pb2.PartitionResult]:
        results = []
        async with self._mutex:
            self._require_active()
            for entry in request.partitions:
                result = controller_pb2.PartitionResult(topic=entry.topic, partition=entry.partition)
                try:
                    await self._reassign(entry)
                except TidelogError as error:
                    result.error_code, result.error_message = int(error.code), error.message
                results.append(result)
        await self.propagate(self.state.brokers)  # added replicas start copying; removed ones stop
        return results

    async def _reassign(self, entry: controller_pb2.ReassignablePartition) -> None:
        key = (entry.topic, entry.partition)
        if entry.topic not in self.state.topics or key not in self.state.partitions:
            raise UnknownTopicOrPartitionError(f"{entry.topic}-{entry.partition} is unknown")
        ongoing = self._reassignment_of(*key)
        if entry.cancel:
            if ongoing is None:
                raise NoReassignmentInProgressError(f"{entry.topic}-{entry.partition} is not being reassigned")
            await self._finish_reassignment(key, reassignment.cancel(ongoing), cancelled=True)
            return
        if ongoing is not None:
            raise ReassignmentInProgressError(
                f"{entry.topic}-{entry.partition} is being reassigned to {ongoing.target}; cancel that first"
            )
        current = self.state.topics[entry.topic].value.replicas(entry.partition)
        moving = reassignment.plan(current, list(entry.replicas), self.state.brokers)
        if moving.replicas == current:
            return  # already there
        state = self.state.partitions[key].value
        record = self.state.topics[entry.topic].value
        name = str(entry.partition)
        updated = dataclasses.replace(
            record,
            assignment={**record.assignment, name: moving.replicas},
            adding={**record.adding, name: moving.adding},
            removing={**record.removing, name: moving.removing},
            original={**record.original, name: moving.original},
        )
        next_state = state.changed(controller_epoch=self.epoch)  # its replicas change
        await self._commit_topic(entry.topic, updated, {key: next_state})
        log.info("reassignment_started", topic=entry.topic, partition=entry.partition, **dataclasses.asdict(moving))
        await self._advance_reassignments([key])  # nothing to add: phase A is already over

    async def _advance_reassignments(self, keys: Iterable[tuple[str, int]] | None = None) -> None:
        """Phase B for every reassignment whose target replicas are all in sync (mutex held)."""
        if keys is None:
            keys = [
                (topic, int(partition))
                for topic, versioned in self.state.topics.items()
                for partition in versioned.value.original
            ]
        for key in list(keys):
            if key[0] not in self.state.topics or key not in self.state.partitions:
                continue
            moving = self._reassignment_of(*key)
            if moving is not None and reassignment.target_in_sync(moving, self.state.partitions[key].value):
                await self._finish_reassignment(key, moving, cancelled=False)

    async def _finish_reassignment(
        self, key: tuple[str, int], moving: reassignment.Reassignment, *, cancelled: bool
    ) -> None:
        topic, partition = key
        live = set(self.state.brokers) - self._shutting_down
        next_state = reassignment.finish(moving, self.state.partitions[key].value, live, self.epoch)
        if next_state is None:
            if cancelled:
                raise ReassignmentInProgressError(
                    f"{topic}-{partition}: no original replica is alive and in sync to lead; try again later"
                )
            return  # phase B waits for a replica of the target to be able to lead
        record = self.state.topics[topic].value
        name = str(partition)
        updated = dataclasses.replace(
            record,
            assignment={**record.assignment, name: moving.target},
            adding={other: brokers for other, brokers in record.adding.items() if other != name},
            removing={other: brokers for other, brokers in record.removing.items() if other != name},
            original={other: brokers for other, brokers in record.original.items() if other != name},
        )
        await self._commit_topic(topic, updated, {key: next_state})
        log.info(
            "reassignment_cancelled" if cancelled else "reassignment_completed",
            topic=topic,
            partition=partition,
            replicas=moving.target,
            removed=moving.removing,
        )
        removed = [broker for broker in moving.removing if broker in self.state.brokers]
        if removed:
            stopped = common_pb2.PartitionState(topic=topic, partition=partition, replicas=removed)
            self.propagate_soon(self.state.brokers)
            task = asyncio.create_task(
                self.broker_requests.stop_replicas(
                    [stopped], self.config.controller_id, self.epoch, self.state.brokers, delete=True
                )
            )
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    async def _commit_topic(
        self, topic: str, record: TopicRecord, states: dict[tuple[str, int], PartitionStateRecord]
    ) -> None:
        """The topic record and some of its partition states in one fenced, compared transaction."""
        held = self.state.topics[topic]
        compares = [compare_mod_revision(topic_key(topic), held.mod_revision)]
        compares += [
            compare_mod_revision(partition_state_key(*key), self.state.partitions[key].mod_revision) for key in states
        ]
        puts = {topic_key(topic): record.to_json()}
        puts.update({partition_state_key(*key): state.to_json() for key, state in states.items()})
        revision = await self._commit(compares, puts)
        self.state.topics[topic] = Versioned(record, revision)
        for key, state in states.items():
            self.state.partitions[key] = Versioned(state, revision)

    # ---- controlled shutdown ---------------------------------------------------------------

    async def controlled_shutdown(self, broker_id: int, incarnation: str) -> list[tuple[str, int]]:
        """Move the broker's leaderships to other in-sync replicas and take it out of the ISRs.

        Returns the partitions it still leads (no other replica in sync); the broker may ask again.
        """
        async with self._mutex:
            self._require_active()
            registered = self.state.brokers.get(broker_id)
            if registered is None or registered.incarnation != incarnation:
                raise RemoteError(ErrorCode.STALE_BROKER_EPOCH, f"broker {broker_id} is not registered as this process")
            self._shutting_down.add(broker_id)
            live = set(self.state.brokers) - self._shutting_down
            remaining: list[tuple[str, int]] = []
            changes: dict[tuple[str, int], PartitionStateRecord] = {}
            for key, versioned in sorted(self.state.partitions.items()):
                state = versioned.value
                if broker_id not in state.isr or key[0] not in self.state.topics:
                    continue
                isr = [broker for broker in state.isr if broker != broker_id]
                leader = state.leader
                if state.leader == broker_id:
                    replicas = self.state.topics[key[0]].value.replicas(key[1])
                    candidates = [broker for broker in replicas if broker in isr and broker in live]
                    if not candidates:
                        remaining.append(key)
                        continue
                    leader = candidates[0]
                elif not isr:
                    continue
                changes[key] = state.changed(leader=leader, isr=isr, controller_epoch=self.epoch)
            if changes:
                await self._write_states(changes)
            log.info("controlled_shutdown", broker=broker_id, moved=len(changes), remaining=len(remaining))
        await self.propagate(self.state.brokers)  # the new leaders serve before the broker goes
        return remaining

    async def controllers(self) -> list[str]:
        prefix = (CONTROLLER_ELECTION_PREFIX + "/").encode()
        response = await self.kv.get(prefix, prefix_range_end(prefix))
        ordered = sorted(response.kvs, key=lambda kv: kv.create_revision)
        return [ControllerRecord.from_json(kv.value).endpoint for kv in ordered]


def _affected_by(removed: frozenset[int]) -> Callable[[PartitionStateRecord], bool]:
    """Partitions to re-elect after broker changes: led by or replicated on a removed broker, or offline."""

    def affected(state: PartitionStateRecord) -> bool:
        return state.leader in removed or state.leader == -1 or any(broker in removed for broker in state.isr)

    return affected


def _alter_error(
    code: ErrorCode, message: str, state: common_pb2.PartitionState | None = None
) -> controller_pb2.AlterPartitionResponse:
    return controller_pb2.AlterPartitionResponse(error_code=int(code), error_message=message, state=state)


def _error_result(name: str, error: TidelogError) -> controller_pb2.TopicResult:
    return controller_pb2.TopicResult(name=name, error_code=int(error.code), error_message=error.message)
