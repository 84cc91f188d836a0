"""What the controller's requests do to the replicas a broker hosts (Kafka's becomeLeaderOrFollower
and stopReplicas): LeaderAndIsr, StopReplica and the ISR the controller committed.

A request is applied only when it is not older than what the broker has (controller epoch, then
partition epoch per partition), so a deposed controller cannot move leadership back, and only when
it is meant for this life of the broker id (KIP-380). Requests are applied one at a time (Kafka's
replicaStateChangeLock): a StopReplica deleting a folder must not race a LeaderAndIsr closing the
same log. Each replica's role moves by replica_role.py's transition table.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import structlog

from tidelog.broker.broker_fencing import BrokerFencing, FencingState
from tidelog.broker.clean_shutdown import CleanShutdown
from tidelog.broker.fetch_session import FetchSession
from tidelog.broker.follower_tracking import FollowerTracking
from tidelog.broker.log_folders import log_folder, open_partition_log
from tidelog.broker.partition import Partition, PartitionKey
from tidelog.broker.replica_fetcher import FollowedPartition, ReplicaFetcherManager
from tidelog.broker.replica_role import ReplicaRole, role_in
from tidelog.broker.storage import LogConfig, PartitionLog
from tidelog.broker.storage_io import BULK_CHUNKS_AT_ONCE, NEW_LOGS_CHUNKS_AT_ONCE, StorageIo
from tidelog.common.clock import Monotonic
from tidelog.common.errors import ErrorCode, RemoteError, StaleControllerEpochError, TidelogError
from tidelog.server_common import long_lived_heap
from tidelog.server_common.loop_slices import LoopSlices
from tidelog.server_common.to_the_end import ToTheEnd
from tidelog.v1 import broker_pb2, common_pb2

__all__ = ["PartitionStates"]

log = structlog.get_logger(__name__)

NEW_LOGS_IN_PARALLEL_MIN: Final = 8  # fewer new replicas in a LeaderAndIsr are opened one by one
SLOW_STATE_CHANGE_S: Final = 1.0  # a LeaderAndIsr that took longer is logged with its timings
WRITTEN_LATELY_S: Final = 2.0  # a partition written to this recently is applied first in a LeaderAndIsr


def _log_failure(error: BaseException) -> None:
    """A change whose caller was cancelled fails unseen otherwise (an expected refusal, a stale
    epoch, is the caller's to answer and is not logged)."""
    if not isinstance(error, TidelogError):
        log.error("state_change_failed", error=repr(error))


class PartitionStates:
    def __init__(
        self,
        broker_id: int,
        incarnation: str,
        data_dir: Path,
        log_defaults: dict[str, str],
        *,
        partitions: dict[PartitionKey, Partition],
        watchers: dict[PartitionKey, set[FetchSession]],
        io: StorageIo,
        fetchers: ReplicaFetcherManager,
        followers: FollowerTracking,
        fencing: BrokerFencing,
        clean_shutdown: CleanShutdown | None = None,
        clock: Monotonic,
    ) -> None:
        self.broker_id = broker_id
        self.incarnation = incarnation
        self.data_dir = data_dir
        self.log_defaults = log_defaults  # topic configs' broker-wide defaults (--log-config)
        self.partitions = partitions  # the replica manager's map, changed only here
        self.watchers = watchers
        self.io = io
        self.fetchers = fetchers
        self.followers = followers
        self.fencing = fencing
        self.clean_shutdown = clean_shutdown or CleanShutdown(data_dir)
        self.clock = clock
        self.controller_epoch = -1
        self._state_change = asyncio.Lock()
        # gRPC cancels a handler whose caller's deadline passed (the controller's, for a LeaderAndIsr
        # slower than it allowed); a change cut there leaked the logs it had opened, file
        # descriptors and all, and the next push opened them again (10,000 partitions on a slow
        # disk: out of file descriptors). Changes run to their end; the next waits under the lock.
        self._changes = ToTheEnd(on_failure=_log_failure)
        self._applied = asyncio.Event()  # set (and replaced) as states are applied while anyone waits
        self._waiting = 0

    async def next_states(self, timeout_s: float) -> None:
        """Return once a LeaderAndIsr has applied more states (or after `timeout_s`)."""
        if timeout_s <= 0:
            return
        self._waiting += 1
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._applied.wait(), timeout_s)
        finally:
            self._waiting -= 1

    def _states_applied(self) -> None:
        if self._waiting:
            applied, self._applied = self._applied, asyncio.Event()
            applied.set()

    def check_incarnation(self, incarnation: str) -> None:
        """Refuse controller requests meant for another life of this broker id (KIP-380)."""
        if incarnation != self.incarnation:
            raise RemoteError(
                ErrorCode.STALE_BROKER_EPOCH,
                f"request for broker incarnation {incarnation!r}; this process is {self.incarnation!r}",
            )

    def check_controller_epoch(self, epoch: int) -> None:
        if epoch < self.controller_epoch:
            raise StaleControllerEpochError(
                f"request from controller epoch {epoch}; this broker has seen epoch {self.controller_epoch}"
            )
        self.controller_epoch = epoch

    async def leader_and_isr(self, request: broker_pb2.LeaderAndIsrRequest) -> list[broker_pb2.PartitionError]:
        return await self._changes.run(self._locked_leader_and_isr(request))

    async def _locked_leader_and_isr(self, request: broker_pb2.LeaderAndIsrRequest) -> list[broker_pb2.PartitionError]:
        async with self._state_change:
            return await self._leader_and_isr(request)

    async def finish_changes(self) -> None:
        """Wait for the state changes under way, whether or not their callers still wait: a
        stopping broker closes its logs only after them (its gRPC server, stopped first, has
        cancelled their handlers, not the changes)."""
        await self._changes.finish()

    async def _leader_and_isr(self, request: broker_pb2.LeaderAndIsrRequest) -> list[broker_pb2.PartitionError]:
        self.check_controller_epoch(request.controller_epoch)
        self.check_incarnation(request.broker_incarnation)
        if request.full and self.fencing.state is FencingState.REGISTERED_AGAIN:
            try:
                return await self._apply_leader_and_isr(request)
            finally:
                self.fencing.lifted_by_whole_state()
        return await self._apply_leader_and_isr(request)

    async def _apply_leader_and_isr(self, request: broker_pb2.LeaderAndIsrRequest) -> list[broker_pb2.PartitionError]:
        for endpoint in request.live_leaders:
            self.fetchers.endpoints[endpoint.broker_id] = f"{endpoint.host}:{endpoint.port}"
        topic_configs = {  # parsed once per topic, not per partition
            topic: json.loads(request.topic_configs_json.get(topic, "{}"))
            for topic in {state.topic for state in request.partitions}
        }
        started = self.clock()
        new_logs = sum((state.topic, state.partition) not in self.partitions for state in request.partitions)
        # Thousands of logs to open (a topic created, a broker's restart) are long-lived state: no
        # collection while they open, then out of the collector's full collections (long_lived_heap.py).
        with long_lived_heap.loading(new_logs, reason="leader_and_isr"):
            return await self._apply_states(request, topic_configs, started)

    async def _apply_states(
        self, request: broker_pb2.LeaderAndIsrRequest, topic_configs: dict[str, dict[str, str]], started: float
    ) -> list[broker_pb2.PartitionError]:
        errors = []
        wanted = set()
        opened = await self._open_new_logs(request.partitions, topic_configs)
        opened_s = self.clock() - started
        new_leaders: dict[PartitionKey, tuple[Partition, int]] = {}
        # A LeaderAndIsr over 10,000 partitions held the loop for over a second; the produce and
        # fetch requests of the partitions it did not touch waited that long (loop_slices.py).
        pacer = LoopSlices()
        for state in self._written_to_first(request.partitions):
            await pacer.pace()
            key = (state.topic, state.partition)
            wanted.add(key)
            try:
                await self._apply_state(state, topic_configs[state.topic], opened.pop(key, None), new_leaders)
                self._states_applied()
            except TidelogError as error:
                errors.append(
                    broker_pb2.PartitionError(
                        topic=state.topic,
                        partition=state.partition,
                        error_code=int(error.code),
                        error_message=error.message,
                    )
                )
        await self._start_leader_epochs(list(new_leaders.values()))
        for unused in opened.values():  # named twice in one request: opened once, used once
            await self.io.run(unused.close)
        if request.full:
            unassigned = [key for key in self.partitions if key not in wanted]
        else:  # a delta names them; only the very topic (a topic created again is another)
            unassigned = [
                (state.topic, state.partition)
                for state in request.unassigned
                if (hosted := self.partitions.get((state.topic, state.partition))) is not None
                and hosted.topic_id == state.topic_id
            ]
        for key in unassigned:
            log.warning("replica_not_assigned_any_more", topic=key[0], partition=key[1])
            await self._stop(key, delete=False)
        long_lived_heap.dropped(len(unassigned), reason="leader_and_isr")
        if opened_s >= SLOW_STATE_CHANGE_S or self.clock() - started >= SLOW_STATE_CHANGE_S:
            log.info(  # a broker's restart at scale: where its first state change spends its time
                "leader_and_isr_applied",
                partitions=len(request.partitions),
                logs_opened_s=round(opened_s, 3),
                seconds=round(self.clock() - started, 3),
                loop_yields=pacer.yields,  # how often it let other requests run (loop_slices.py)
            )
        return errors

    def _written_to_first(self, states: Sequence[common_pb2.PartitionState]) -> list[common_pb2.PartitionState]:
        """The states of partitions written to in the last WRITTEN_LATELY_S first, the others after,
        each in the controller's order. A controlled shutdown's push moves thousands of leaderships
        at once, applied in 0.3-0.9 s on a busy broker; the few partitions producers are writing
        to, whose every acks=all acknowledgement waits for the new leader and its followers to
        take their states, waited for their turn among thousands of idle ones."""
        horizon = time.monotonic() - WRITTEN_LATELY_S
        partitions = self.partitions
        first: list[common_pb2.PartitionState] = []
        rest: list[common_pb2.PartitionState] = []
        for state in states:
            hosted = partitions.get((state.topic, state.partition))
            (first if hosted is not None and hosted.appended_s >= horizon else rest).append(state)
        return first + rest if first else list(states)

    async def _open_new_logs(
        self, states: Sequence[common_pb2.PartitionState], topic_configs: dict[str, dict[str, str]]
    ) -> dict[PartitionKey, PartitionLog]:
        """The logs of replicas new to this broker, opened side by side on the I/O pool (a topic of
        thousands of partitions is mostly file creation, which the threads overlap), a chunk per
        task so the event loop handles a few hundred completions rather than thousands."""
        new = [state for state in states if (state.topic, state.partition) not in self.partitions]
        if len(new) < NEW_LOGS_IN_PARALLEL_MIN:
            return {}
        configs = {topic: self._log_config(topic_configs[topic]) for topic in {state.topic for state in new}}

        def open_chunk(chunk: list[common_pb2.PartitionState]) -> list[tuple[PartitionKey, PartitionLog]]:
            opened = []
            for state in chunk:
                folder = log_folder(self.data_dir, state.topic, state.partition)
                partition_log = open_partition_log(
                    self.data_dir,
                    state.topic,
                    state.partition,
                    state.topic_id,
                    configs[state.topic],
                    clean=self.clean_shutdown.consume(folder.name),
                    found=folder.name in folders,
                )
                if state.leader == self.broker_id:
                    # Here, side by side on the I/O threads, rather than one I/O task after
                    # another in _apply_state (a new topic makes thousands of leaders at once).
                    # In memory: the log's flush writes the history (ADR 0030).
                    partition_log.assign_leader_epoch(state.leader_epoch)
                opened.append(((state.topic, state.partition), partition_log))
            return opened

        # Logs a restart finds are opened a chunk at a time, new ones two (storage_io.py says why).
        folders = set(await self.io.run(_listing, self.data_dir))
        found: list[common_pb2.PartitionState] = []
        created: list[common_pb2.PartitionState] = []
        for state in new:
            there = log_folder(self.data_dir, state.topic, state.partition).name in folders
            (found if there else created).append(state)
        chunks = [
            *await self.io.each_chunk(open_chunk, found, parallel=BULK_CHUNKS_AT_ONCE),
            *await self.io.each_chunk(open_chunk, created, parallel=NEW_LOGS_CHUNKS_AT_ONCE),
        ]
        return {key: opened for chunk in chunks for key, opened in chunk}

    async def _start_leader_epochs(self, new_leaders: list[tuple[Partition, int]]) -> None:
        """Start the epochs of the partitions a LeaderAndIsr made leaders of, side by side on the
        I/O threads: a broker taking over thousands of leaderships at once (another broker's
        controlled shutdown) took seconds one by one, while that broker and its producers waited.
        An append meanwhile starts the epoch itself (append_as_leader); again here, it is kept."""

        def start_chunk(chunk: list[tuple[Partition, int]]) -> None:
            for partition, leader_epoch in chunk:
                partition.log.assign_leader_epoch(leader_epoch)

        hosted = [
            (partition, epoch)
            for partition, epoch in new_leaders
            if self.partitions.get((partition.topic, partition.partition)) is partition
        ]
        await self.io.each_chunk(start_chunk, hosted, parallel=BULK_CHUNKS_AT_ONCE)

    async def _apply_state(
        self,
        state: common_pb2.PartitionState,
        configs: dict[str, str],
        opened: PartitionLog | None,
        new_leaders: dict[PartitionKey, tuple[Partition, int]],
    ) -> None:
        """Take one partition's state. A leadership in a new epoch goes into `new_leaders`, whose
        epochs the caller starts for all of them at once (`_start_leader_epochs`)."""
        key = (state.topic, state.partition)
        existing = self.partitions.get(key)
        news = True  # for the fetches and sessions of this partition: its leadership changed
        if existing is not None and existing.topic_id == state.topic_id:
            if state == existing.state and configs == existing.configs:
                return  # told again what we hold (a new controller's first, whole push): nothing to do
            if state.partition_epoch < existing.state.partition_epoch:
                raise RemoteError(
                    ErrorCode.FENCED_LEADER_EPOCH,
                    f"partition epoch {state.partition_epoch} is older than {existing.state.partition_epoch}",
                )
            news = (state.leader, state.leader_epoch) != (existing.state.leader, existing.state.leader_epoch)
            existing.move_to(state, self.broker_id)
            if configs != existing.configs:  # whole state arrives at every change: act on real changes only
                await self.io.run(existing.log.update_config, self._log_config(configs))  # waits for the log's lock
                existing.configs = configs
        else:
            if existing is not None:  # the topic was deleted and created again under the same name
                await self._stop(key, delete=True)
            partition_log: PartitionLog = (
                opened
                if opened is not None
                else await self.io.run(
                    functools.partial(
                        open_partition_log,
                        self.data_dir,
                        state.topic,
                        state.partition,
                        state.topic_id,
                        self._log_config(configs),
                        clean=self.clean_shutdown.consume(log_folder(self.data_dir, *key).name),
                    )
                )
            )
            existing = Partition(
                state.topic,
                state.partition,
                state.topic_id,
                partition_log,
                state,
                role_in(state, self.broker_id),
                configs=configs,
                watchers=self.watchers,
                leader_since_s=self.clock(),
            )
            self.partitions[key] = existing
        if existing.role is ReplicaRole.LEADER:
            self.fetchers.unfollow(key)
            if existing.log.leader_epochs.latest_epoch < state.leader_epoch:
                existing.forget_followers(self.clock())
                new_leaders[key] = (existing, state.leader_epoch)
            existing.advance_high_watermark(self.broker_id)
        else:
            # Before anything can truncate this log as a follower: an append admitted while we led
            # must not land after the truncation (it would leave a record the leader never had).
            existing.log.fence_leader_epoch(state.leader_epoch)
            if existing.role is ReplicaRole.FOLLOWER:
                self.fetchers.follow(
                    FollowedPartition(state.topic, state.partition, existing.log, existing.leader, state.leader_epoch)
                )
            else:
                self.fetchers.unfollow(key)
        existing.wake_produce_waiters()  # each checks whether it still leads in its own epoch
        if news:
            # A waiting fetch answers (an error, from the replica that no longer leads), and the
            # sessions holding it list it. Not for an ISR change alone: a fetch answer says nothing
            # of the ISR, and a moved high watermark told them itself (advance_high_watermark). A
            # controlled shutdown's 3,333 ISR shrinks put every one of them in the next answer to
            # each follower, 0.3 s of every acks=all produce to the leader's busy partitions.
            existing.notify_changed()
        if existing.role is ReplicaRole.LEADER:
            self.followers.isr_watch.add(key)

    def _log_config(self, configs: dict[str, str]) -> LogConfig:
        return LogConfig.from_configs({**self.log_defaults, **configs})

    def apply_committed_state(self, state: common_pb2.PartitionState) -> None:
        """The controller committed this ISR for a partition we lead (AlterPartition's answer).

        Only an ISR change within our leadership is applied here; a state that moved the leadership
        waits for its LeaderAndIsr, which also fences and re-points the replica (`_apply_state`).
        """
        hosted = self.partitions.get((state.topic, state.partition))
        if hosted is None or state.partition_epoch <= hosted.state.partition_epoch:
            return
        if hosted.role is not ReplicaRole.LEADER or state.leader_epoch != hosted.state.leader_epoch:
            return
        hosted.move_to(state, self.broker_id)
        hosted.advance_high_watermark(self.broker_id)
        hosted.wake_produce_waiters()
        self.followers.isr_watch.add((state.topic, state.partition))

    async def stop_replicas(self, request: broker_pb2.StopReplicaRequest) -> None:
        await self._changes.run(self._locked_stop_replicas(request))

    async def _locked_stop_replicas(self, request: broker_pb2.StopReplicaRequest) -> None:
        async with self._state_change:
            self.check_controller_epoch(request.controller_epoch)
            self.check_incarnation(request.broker_incarnation)
            for state in request.partitions:
                await self._stop((state.topic, state.partition), delete=request.delete_partitions)
            long_lived_heap.dropped(len(request.partitions), reason="stop_replica")

    async def _stop(self, key: PartitionKey, *, delete: bool) -> None:
        self.fetchers.unfollow(key)
        partition = self.partitions.pop(key, None)
        if partition is None:
            if delete:
                await self.io.run(shutil.rmtree, log_folder(self.data_dir, *key), True)
            return
        partition.delete()
        partition.notify_changed()
        partition.wake_produce_waiters()
        await self.io.run(partition.log.delete if delete else partition.log.close)


def _listing(data_dir: Path) -> list[str]:
    """The data directory's entries (none when it is not there yet)."""
    try:
        return os.listdir(data_dir)
    except FileNotFoundError:
        return []
