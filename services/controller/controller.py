"""The controller: one active instance, elected through etcd, owns all partition leadership.

Every controller process runs `Controller.run()`: it opens an etcd session, campaigns, and while
elected (until its session ends or a fenced write fails) it
1. bumps the controller epoch (a fenced transaction),
2. loads brokers, topics and partition states at one etcd revision (the seeds' controller
   failover: rebuild everything from the store),
3. elects leaders for partitions whose leader is gone and sends every live broker its full
   LeaderAndIsr and an UpdateMetadata ("resend leadership"),
4. then serves admin requests and broker changes one at a time under `self._mutex`.

This module is the event loop of that life and the entry point of every request; the work is
split by job, as Kafka's controller is:
- `controller_role.py`: the role (candidate, loading, active, deposed, stopping) and its epoch;
- `metadata_store.py`: the controller's copy of the metadata and the fenced etcd writes;
- `partition_leadership.py`: elections and ISR changes (the partition state machine);
- `propagation.py` (with `state_delta.py`): pushing the state to brokers, whole or what changed;
- `topic_admin.py`: creating and deleting topics, partitions and configs;
- `reassignments.py` (with the phases in `reassignment.py`): moving replicas (KIP-455).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Coroutine, Iterable
from typing import Any, Final

import structlog
from etcd3aio import Etcd3Client, prefix_range_end

from tidelog.common.channels import ChannelPool
from tidelog.common.errors import InvalidRequestError, NotControllerError, TidelogError
from tidelog.controller.broker_liveness import BrokerLiveness
from tidelog.controller.broker_requests import BrokerRequests
from tidelog.controller.cluster_state import ClusterState
from tidelog.controller.controller_config import ControllerConfig
from tidelog.controller.controller_role import ControllerRole, Role
from tidelog.controller.isr_commits import IsrCommits, merged_isr_changes
from tidelog.controller.metadata_store import ConflictError, FencedError, MetadataStore
from tidelog.controller.partition_leadership import PartitionLeadership, affected_by
from tidelog.controller.process_watch import ControllerLiveness
from tidelog.controller.propagation import Propagation
from tidelog.controller.reassignments import Reassignments
from tidelog.controller.topic_admin import TopicAdmin
from tidelog.server_common import long_lived_heap
from tidelog.server_common.etcd.active_controller import active_controller_endpoint
from tidelog.server_common.etcd.election import Election, NotLeaderError
from tidelog.server_common.etcd.session import ETCD_UNREACHABLE, Session, new_session
from tidelog.server_common.metadata import (
    BROKERS_PREFIX,
    CONTROLLER_ELECTION_PREFIX,
    BrokerRegistration,
    ControllerRecord,
)
from tidelog.v1 import broker_pb2, common_pb2, controller_pb2

__all__ = ["Controller"]

log = structlog.get_logger(__name__)

EVENT_PUT: Final = 0
TOPICS_PER_REQUEST_MAX: Final = 1000
ISR_CHANGES_PER_REQUEST_MAX: Final = 10_000  # a broker sends at most ISR_CHANGES_PER_REQUEST (isr_manager)
CAMPAIGN_RETRY_S: Final = 0.5


class Controller:
    def __init__(
        self,
        config: ControllerConfig,
        etcd: Etcd3Client,
        *,
        broker_requests: BrokerRequests | None = None,
        rng: random.Random | None = None,
        channels: ChannelPool | None = None,
    ) -> None:
        self.config = config
        self.etcd = etcd
        self.broker_requests = broker_requests or BrokerRequests(
            timeout_s=config.settings.controller_socket_timeout_ms / 1000, channels=channels
        )
        probes = channels or ChannelPool()
        self.liveness = ControllerLiveness(probes)
        # While active: every registered broker's process watched, a dead one's lease revoked.
        self.broker_liveness = BrokerLiveness(etcd, probes)
        self.role = ControllerRole(config.controller_id)
        self.active = self.role.active  # set exactly while the role is ACTIVE
        self.store = MetadataStore(etcd, self.role)
        self.leadership = PartitionLeadership(self.store, self.role)
        self._heap = long_lived_heap.PartitionCountWatch()
        self.propagation = Propagation(
            self.broker_requests,
            self.store,
            self.role,
            controller_id=config.controller_id,
            endpoint=config.endpoint,
            leader_balance=broker_pb2.LeaderBalance(
                auto_leader_rebalance_enable=config.settings.auto_leader_rebalance_enable,
                leader_imbalance_per_broker_percentage=config.settings.leader_imbalance_per_broker_percentage,
            ),
            shutting_down=self.leadership.shutting_down,
            on_first_push=lambda _: self._preferred_returned.set(),  # leaderships it may take now
        )
        self.topics = TopicAdmin(self.store, self.leadership, config.settings, rng or random.Random())
        self.reassignments = Reassignments(self.store, self.role, self.leadership, self.propagation)
        self._mutex = asyncio.Lock()
        self.isr_commits = IsrCommits(self._mutex, self._alter_partitions)
        # A preferred replica rejoined an ISR while another broker leads: check the balance now
        # rather than at the next interval (after a few failovers every leadership can sit on one
        # broker, whose next failure would then stop every partition at once).
        self._preferred_returned = asyncio.Event()

    @property
    def epoch(self) -> int:
        """The controller epoch of this instance's current (or last) leadership; -1 before any."""
        return self.role.epoch

    @property
    def state(self) -> ClusterState:
        return self.store.state

    async def propagate(self, brokers: Iterable[int]) -> None:
        await self.propagation.propagate(brokers)
        # After the push (the collection's pause is not the brokers' wait): thousands of partition
        # states loaded or created live as long as the term, out of full collections from now on.
        self._heap.moved_to(len(self.state.partitions), reason="controller_state")

    # ---- election loop ---------------------------------------------------------------------

    async def run(self) -> None:
        """Campaign, lead while elected, campaign again; until `stop()`."""
        while not self.role.stopping.is_set():
            if self.role.current is not Role.CANDIDATE:
                self.role.move(Role.CANDIDATE, reason="campaigning")
            holder = f"controller-{self.config.controller_id}"
            session = await new_session(self.etcd, ttl_s=self.config.session_ttl_s, holder=holder)
            election = Election(session, CONTROLLER_ELECTION_PREFIX)
            try:
                record = ControllerRecord(self.config.controller_id, -1, self.config.endpoint)
                await self._until_stopping(election.campaign(record.to_json(), predecessor_dead=self.liveness.dead))
                if self.role.stopping.is_set():
                    break
                self.role.move(Role.LOADING, reason="elected")
                self.store.election = election
                await self._lead(election, session)
                self.role.move(Role.DEPOSED, reason="session lost")
            except (NotLeaderError, FencedError, ConflictError) as error:
                log.warning("controller_deposed", controller=self.config.controller_id, reason=str(error))
                self.role.move(Role.DEPOSED, reason=str(error))
            except ETCD_UNREACHABLE as error:  # cut off from etcd: whatever we held goes with the session
                log.warning("controller_etcd_unreachable", controller=self.config.controller_id, error=repr(error))
                if self.role.current in (Role.LOADING, Role.ACTIVE):
                    self.role.move(Role.DEPOSED, reason="etcd unreachable")
            finally:
                self.store.election = None
                with contextlib.suppress(Exception):
                    await election.resign()
                await session.close()
            if not self.role.stopping.is_set():
                await asyncio.sleep(CAMPAIGN_RETRY_S)

    async def _until_stopping(self, work: Coroutine[Any, Any, Any]) -> None:
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
            self.role.lead_under(await self.store.bump_epoch(election, self.config.controller_id, self.config.endpoint))
            revision = await self.store.load()  # (a new journal: every broker is told the whole state first)
            log.info(
                "controller_elected",
                controller=self.config.controller_id,
                epoch=self.epoch,
                brokers=sorted(self.state.brokers),
                topics=len(self.state.topics),
            )
            await self.leadership.initialise_missing_states()
            await self.leadership.elect(lambda state: state.leader not in self.state.brokers)
            await self.reassignments.advance()  # a move the previous controller left under way
            if not self.role.move(Role.ACTIVE, reason=f"epoch {self.epoch}"):
                return  # stopping meanwhile
        await self.propagate(self.state.brokers)
        self._follow_broker_processes()
        watcher = asyncio.create_task(self._watch_brokers(revision + 1))
        resync = asyncio.create_task(self.propagation.resync())
        # A term checks the balance at once: a hand-back the last term left undone would otherwise
        # wait out the interval, and with it the readiness of the broker it is owed to.
        self._preferred_returned.set()
        rebalance = asyncio.create_task(self._rebalance_leaders())
        try:
            await self._until_stopping(self._first_of(session.done.wait(), self.role.deposed.wait(), watcher))
        finally:
            for task in (watcher, resync, rebalance):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            await self.propagation.cancel_background()
            await self.broker_liveness.close()

    @staticmethod
    async def _first_of(*waits: Any) -> None:
        tasks = [asyncio.ensure_future(wait) for wait in waits]
        done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
        for task in done:
            task.result()

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
                shutting_down = self.leadership.shutting_down
                for event in response.events:
                    broker_id = int(event.kv.key.decode().rsplit("/", 1)[1])
                    self.propagation.forget(broker_id)  # (re-)registered or gone: told the whole state next
                    if event.type == EVENT_PUT:
                        registration = BrokerRegistration.from_json(event.kv.value)
                        previous = self.state.brokers.get(broker_id)
                        if previous is not None and previous.incarnation != registration.incarnation:
                            removed.add(broker_id)  # a new life: out of every ISR, as if it had left
                            shutting_down.discard(broker_id)
                        else:
                            removed.discard(broker_id)
                        self.state.brokers[broker_id] = registration
                        added.add(broker_id)
                    else:
                        self.state.brokers.pop(broker_id, None)
                        shutting_down.discard(broker_id)
                        removed.add(broker_id)
                        added.discard(broker_id)
                log.info(
                    "brokers_changed", added=sorted(added), removed=sorted(removed), live=sorted(self.state.brokers)
                )
                # As if the removed (and re-registered) brokers left: out of the ISRs, leaders elsewhere ...
                await self.leadership.elect(affected_by(frozenset(removed)), fenced=frozenset(removed))
                # ... then as if the re-registered ones returned: they lead what only they can lead.
                await self.leadership.elect(lambda state: state.leader == -1)
                await self.reassignments.advance()
            self.propagation.propagate_soon(self.state.brokers)  # the next change is handled without waiting
            self._follow_broker_processes()

    def _follow_broker_processes(self) -> None:
        if self.config.settings.controller_broker_liveness_probe_enable:
            self.broker_liveness.follow(self.state.brokers)

    # ---- admin requests (called by the admin service) --------------------------------------

    def _require_active(self) -> None:
        if not self.role.is_active:
            raise NotControllerError(f"controller {self.config.controller_id} is not the active controller")

    async def active_endpoint(self) -> str:
        """host:port of the active controller, or "" when none is elected."""
        if self.active.is_set():
            return self.config.endpoint
        return await active_controller_endpoint(self.etcd)

    async def create_topics(self, request: controller_pb2.CreateTopicsRequest) -> list[controller_pb2.TopicResult]:
        if len(request.topics) > TOPICS_PER_REQUEST_MAX:
            raise InvalidRequestError(f"at most {TOPICS_PER_REQUEST_MAX} topics per request")
        results = []
        created: list[str] = []
        async with self._mutex:
            self._require_active()
            for new_topic in request.topics:
                try:
                    await self.topics.create(new_topic, validate_only=request.validate_only)
                    results.append(controller_pb2.TopicResult(name=new_topic.name))
                    created.append(new_topic.name)
                except TidelogError as error:
                    results.append(_error_result(new_topic.name, error))
        if created and not request.validate_only:
            await self.propagate(self.state.brokers)
        return results

    async def delete_topics(self, request: controller_pb2.DeleteTopicsRequest) -> list[controller_pb2.TopicResult]:
        results = []
        stopped: list[common_pb2.PartitionState] = []
        async with self._mutex:
            self._require_active()
            for name in request.names:
                try:
                    stopped.extend(await self.topics.delete(name))
                    results.append(controller_pb2.TopicResult(name=name))
                except TidelogError as error:
                    results.append(_error_result(name, error))
        if stopped:
            await self.propagation.stop_replicas(stopped)
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
                    await self.topics.add_partitions(increase.topic, increase.total_count)
                    results.append(controller_pb2.TopicResult(name=increase.topic))
                except TidelogError as error:
                    results.append(_error_result(increase.topic, error))
        await self.propagate(self.state.brokers)
        return results

    async def alter_configs(self, request: controller_pb2.AlterConfigsRequest) -> list[controller_pb2.TopicResult]:
        results = []
        async with self._mutex:
            self._require_active()
            for change in request.changes:
                try:
                    await self.topics.alter_configs(change)
                    results.append(controller_pb2.TopicResult(name=change.topic))
                except TidelogError as error:
                    results.append(_error_result(change.topic, error))
        await self.propagate(self.state.brokers)
        return results

    async def alter_partition(
        self, request: controller_pb2.AlterPartitionRequest
    ) -> controller_pb2.AlterPartitionResponse:
        """A leader changes ISRs (KIP-497): each only for the exact state it knows, only as leader;
        committed with whatever other AlterPartitions wait meanwhile (isr_commits.py)."""
        if len(request.partitions) > ISR_CHANGES_PER_REQUEST_MAX:
            raise InvalidRequestError(f"at most {ISR_CHANGES_PER_REQUEST_MAX} ISR changes per request")
        return await self.isr_commits.submit(request)

    async def _alter_partitions(
        self, requests: list[controller_pb2.AlterPartitionRequest]
    ) -> list[controller_pb2.AlterPartitionResponse]:
        """Under the mutex: the accepted changes of every request committed together (one etcd
        transaction per STATES_PER_TXN), a response per request."""
        self._require_active()
        changes, responses = merged_isr_changes(requests, self.leadership.isr_change)
        befores = {key: self.state.partitions[key].value for key in changes}
        if changes:
            await self.store.write_states(changes)
            log.info("isr_changed", brokers=sorted({r.broker_id for r in requests}), partitions=len(changes))
            for key, before in befores.items():
                replicas = self.state.topics[key[0]].value.replicas(key[1])
                joined = set(changes[key].isr) - set(before.isr)
                if replicas and replicas[0] in joined and replicas[0] != before.leader:
                    self._preferred_returned.set()
            await self.reassignments.advance(list(changes))  # phase A may just have ended
            for response in responses:
                for result in response.partitions:
                    if not result.error_code:
                        result.state.CopyFrom(self.state.partition_proto(result.topic, result.partition))
            # The leaders apply the answers themselves; the others learn them in the background
            # (a stalled follower must not hold up the answer past the leader's deadline).
            self.propagation.propagate_soon(self.state.brokers)
        return responses

    # ---- leader elections on request, and the automatic rebalance --------------------------

    async def elect_leaders(self, request: controller_pb2.ElectLeadersRequest) -> list[controller_pb2.PartitionResult]:
        """Preferred or unclean elections for the partitions asked (all when none are named)."""
        unclean = request.election_type == controller_pb2.UNCLEAN
        async with self._mutex:
            self._require_active()
            keys = [(ref.topic, ref.partition) for ref in request.partitions] or sorted(self.state.partitions)
            results, changes = self.leadership.elections(keys, unclean=unclean)
            if changes:
                await self.store.write_states(changes)
                log.info("leaders_elected_on_request", partitions=len(changes), unclean=unclean)
        if changes:
            await self.propagate(self.state.brokers)
        return results

    async def _rebalance_leaders(self) -> None:
        """auto.leader.rebalance.enable: preferred elections where imbalanced, every check interval
        and as soon as a preferred replica rejoins an ISR."""
        settings = self.config.settings
        if not settings.auto_leader_rebalance_enable:
            return
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    self._preferred_returned.wait(), settings.leader_imbalance_check_interval_seconds
                )
            self._preferred_returned.clear()
            try:
                async with self._mutex:
                    if not self.role.is_active:
                        continue
                    changes = self.leadership.rebalance(
                        settings.leader_imbalance_per_broker_percentage,
                        ready=self.propagation.applied_since_registering,
                    )
                    if changes:
                        await self.store.write_states(changes)
                        log.info("leaders_rebalanced", partitions=len(changes))
                if changes:
                    await self.propagate(self.state.brokers)
            except (ConflictError, FencedError):
                raise
            except Exception:
                log.exception("leader_rebalance_failed")

    # ---- reassignment ----------------------------------------------------------------------

    def ongoing_reassignments(self) -> list[controller_pb2.OngoingReassignment]:
        self._require_active()
        return self.reassignments.ongoing()

    async def alter_reassignments(
        self, request: controller_pb2.AlterPartitionReassignmentsRequest
    ) -> list[controller_pb2.PartitionResult]:
        results = []
        async with self._mutex:
            self._require_active()
            for entry in request.partitions:
                result = controller_pb2.PartitionResult(topic=entry.topic, partition=entry.partition)
                try:
                    await self.reassignments.alter(entry)
                except TidelogError as error:
                    result.error_code, result.error_message = int(error.code), error.message
                results.append(result)
        await self.propagate(self.state.brokers)  # added replicas start copying; removed ones stop
        return results

    # ---- controlled shutdown ---------------------------------------------------------------

    async def controlled_shutdown(self, broker_id: int, incarnation: str) -> list[tuple[str, int]]:
        """Move the broker's leaderships to other in-sync replicas and take it out of the ISRs.

        Returns the partitions it still leads (no other replica in sync); the broker may ask again.
        Two steps, each written and pushed before the next: out of the ISRs of the partitions it
        follows, then its leaderships (and the ISRs of those). In one step of 10,006 states at
        10,000 partitions, a leader of a partition it followed waited for its fetches while it
        took its new roles (0.5 s of etcd writes, then 0.6-1 s for each broker to apply them):
        every acks=all producer stood still for 1.6-1.8 s.
        """
        self._require_active()
        self.leadership.announce_shutdown(broker_id, incarnation)  # seen by the requests ahead of it
        figures: dict[str, float] = {}
        moved = 0
        remaining: list[tuple[str, int]] = []
        for step in ("followed", "led"):
            asked = time.perf_counter()
            async with self._mutex:
                self._require_active()
                changes, remaining = self.leadership.shutdown_changes(
                    broker_id, incarnation, followed_only=step == "followed"
                )
                if changes:
                    await self.store.write_states(changes)
            written = time.perf_counter()
            if changes:  # (nothing moved, nothing to wait for: the brokers of a stopping cluster go at once)
                await self.propagate(self.state.brokers)  # the new leaders serve before the broker goes
            moved += len(changes)
            figures[f"{step}_written_s"] = round(written - asked, 3)
            figures[f"{step}_pushed_s"] = round(time.perf_counter() - written, 3)
        # where a broker's shutdown at scale waits: each step's seconds
        log.info("controlled_shutdown", broker=broker_id, moved=moved, remaining=len(remaining), **figures)
        return remaining

    async def controllers(self) -> list[str]:
        prefix = (CONTROLLER_ELECTION_PREFIX + "/").encode()
        response = await self.store.kv.get(prefix, prefix_range_end(prefix))
        ordered = sorted(response.kvs, key=lambda kv: kv.create_revision)
        return [ControllerRecord.from_json(kv.value).endpoint for kv in ordered]


def _error_result(name: str, error: TidelogError) -> controller_pb2.TopicResult:
    return controller_pb2.TopicResult(name=name, error_code=int(error.code), error_message=error.message)
