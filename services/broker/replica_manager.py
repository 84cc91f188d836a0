"""The partitions a broker hosts and what it does with them: append, read, obey the controller.

Each hosted replica is a `Partition`: its PartitionLog plus the leadership the controller last
sent (leader, ISR, leader epoch, partition epoch). LeaderAndIsr requests are applied only when
they are not older than what the broker has (controller epoch, then partition epoch per partition),
so a deposed controller cannot move leadership back.

Disk work (append, read, flush, retention) runs on a bounded thread pool (`num.io.threads`): the
event loop never waits for a write or an fsync. As leader, a partition tracks each follower's log
end offset from its fetches and keeps HW = min log end offset over the ISR; followers replicate
through replica_fetcher.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import math
import os
import shutil
import time
import uuid
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Final, TypeVar

import structlog

from tidelog.broker.broker_fencing import BrokerFencing, FencingState
from tidelog.broker.fetch_session import FetchSession, FetchSessionCache
from tidelog.broker.replica_fetcher import FollowedPartition, ReplicaFetcherManager
from tidelog.broker.replica_role import ReplicaRole, role_in, transition
from tidelog.broker.request_metrics import LOCAL_TIME_MS, QUEUE_TIME_MS, REMOTE_TIME_MS
from tidelog.broker.server_metrics import BusyMeter
from tidelog.broker.storage import LogCleaner, LogConfig, PartitionLog
from tidelog.broker.storage.partition_log import AppendInfo
from tidelog.broker.topic_metrics import topic_meters
from tidelog.common.channels import ChannelPool
from tidelog.common.errors import (
    ErrorCode,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    RemoteError,
    RequestTimedOutError,
    StaleControllerEpochError,
    TidelogError,
    UnknownTopicOrPartitionError,
)
from tidelog.v1 import broker_pb2, common_pb2

__all__ = ["Partition", "PartitionRead", "ReplicaManager"]

log = structlog.get_logger(__name__)

PARTITION_METADATA_FILE: Final = "partition.metadata"
T = TypeVar("T")

NEW_LOGS_IN_PARALLEL_MIN: Final = 8  # fewer new replicas in a LeaderAndIsr are opened one by one
LOGS_PER_TASK: Final = 64  # logs one I/O task opens (new ones) or closes in a row


@dataclasses.dataclass(frozen=True, slots=True)
class PartitionRead:
    """What a fetch read from one partition, before it becomes part of a protobuf response."""

    topic: str
    partition: int
    data: bytes
    high_watermark: int
    log_start_offset: int
    log_end_offset: int
    error_code: int = 0
    error_message: str = ""


@dataclasses.dataclass(slots=True)
class Partition:
    topic: str
    partition: int
    topic_id: str
    log: PartitionLog
    state: common_pb2.PartitionState
    role: ReplicaRole
    appended: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    # Leader only: each follower's log end offset as its last fetch said, and when it was last
    # caught up with our log end (for replica.lag.time.max.ms). Reset at every new leader epoch.
    follower_end: dict[int, int] = dataclasses.field(default_factory=dict)
    follower_caught_up_s: dict[int, float] = dataclasses.field(default_factory=dict)
    follower_fetched_s: dict[int, float] = dataclasses.field(default_factory=dict)  # last fetch, any offset
    # Which life of each follower the three maps above describe (KIP-903): a fetch from a new life
    # resets them, so a restarted replica is judged only on what it holds now.
    follower_incarnation: dict[int, str] = dataclasses.field(default_factory=dict)
    leader_since_s: float = dataclasses.field(default_factory=time.monotonic)
    configs: dict[str, str] = dataclasses.field(default_factory=dict)  # the topic's own, as last applied
    # An ISR change sent to the controller and not yet answered: (the partition epoch it was asked
    # against, the ISR asked for). Until a state with a newer partition epoch arrives, the high
    # watermark counts the union of both ISRs (KIP-497's maximal ISR): the controller may already
    # have committed the change, and a replica it added may be elected even if we never learn of it.
    pending_isr: tuple[int, tuple[int, ...]] | None = None
    # The last ISR change the controller refused as INELIGIBLE_REPLICA, as isr_manager keys it
    # (partition epoch, ISR, joiners' lives, live brokers), and when: not asked again while all
    # of that stays the same, for INELIGIBLE_RETRY_S at most.
    refused_isr: tuple[tuple[object, ...], float] | None = None
    high_watermark_moved: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    # The incremental fetch sessions holding this partition, by key (the replica manager's map,
    # shared by every partition: a partition marks them when it has news).
    watchers: dict[tuple[str, int], set[FetchSession]] | None = None
    # Leader only: the session through which each follower last fetched this partition. A session
    # fetch that leaves the partition out means "same offset as before": the follower's liveness
    # is then the session's last fetch (`fetched_s`, `caught_up_s`).
    follower_sessions: dict[int, FetchSession] = dataclasses.field(default_factory=dict)

    @property
    def leader(self) -> int:
        return self.state.leader

    def move_to(self, state: common_pb2.PartitionState, broker_id: int) -> None:
        """Take the controller's newer `state`, checked by replica_role.transition."""
        self.role = transition(self.role, self.state, state, broker_id)
        self.state = state

    def delete(self) -> None:
        assert self.role is not ReplicaRole.DELETED, "a replica is deleted once"
        self.role = ReplicaRole.DELETED

    def forget_followers(self) -> None:
        """A new leader epoch: what followers fetched in an older one proves nothing now."""
        self.follower_end.clear()
        self.follower_caught_up_s.clear()
        self.follower_fetched_s.clear()
        self.follower_incarnation.clear()
        self.follower_sessions.clear()
        self.leader_since_s = time.monotonic()

    def fetched_s(self, replica_id: int) -> float:
        """When the follower last fetched this partition (any offset); -inf if never."""
        stored = self.follower_fetched_s.get(replica_id, -math.inf)
        session = self.follower_sessions.get(replica_id)
        if session is not None and session.holds((self.topic, self.partition)):
            return max(stored, session.last_fetch_s)
        return stored

    def caught_up_s(self, replica_id: int, default: float) -> float:
        """When the follower last held our whole log (for replica.lag.time.max.ms)."""
        stored = self.follower_caught_up_s.get(replica_id, default)
        session = self.follower_sessions.get(replica_id)
        if (
            session is not None
            and session.holds((self.topic, self.partition))
            and self.follower_end.get(replica_id, -1) >= self.log.log_end_offset
        ):
            return max(stored, session.last_fetch_s)  # it fetched again since, still at our end
        return stored

    def note_follower_fetch(
        self, replica_id: int, incarnation: str, fetch_offset: int, now: float, session: FetchSession | None = None
    ) -> None:
        """Leader: a follower fetched from `fetch_offset`, so it holds everything below it."""
        if self.follower_incarnation.get(replica_id) != incarnation:
            if replica_id in self.follower_incarnation:
                log.info(
                    "follower_new_life",
                    topic=self.topic,
                    partition=self.partition,
                    replica=replica_id,
                    previous_end=self.follower_end.get(replica_id, -1),
                    fetch_offset=fetch_offset,
                )
            self.follower_end.pop(replica_id, None)
            self.follower_caught_up_s.pop(replica_id, None)
            self.follower_fetched_s.pop(replica_id, None)
            self.follower_incarnation[replica_id] = incarnation
        self.follower_end[replica_id] = fetch_offset
        self.follower_fetched_s[replica_id] = now
        if session is None:
            self.follower_sessions.pop(replica_id, None)
        else:
            self.follower_sessions[replica_id] = session
        if fetch_offset >= self.log.log_end_offset:
            self.follower_caught_up_s[replica_id] = now

    def wake_produce_waiters(self) -> None:
        """Wake acks=all requests waiting on this partition: the HW moved or the leadership changed."""
        self.high_watermark_moved.set()
        self.high_watermark_moved = asyncio.Event()

    def notify_appended(self) -> None:
        """Wake fetches waiting on this partition (a fresh event for the next waiters), and tell
        the fetch sessions holding it that it has news."""
        self.appended.set()
        self.appended = asyncio.Event()
        if self.watchers:
            key = (self.topic, self.partition)
            for session in self.watchers.get(key, ()):
                session.mark(key)

    def maximal_isr(self) -> Collection[int]:
        """The ISR the high watermark must wait for: the committed one and any change in flight.

        On every append and follower fetch: no set is built unless a change is in flight.
        """
        committed: Collection[int] = self.state.isr
        if self.pending_isr is None or self.pending_isr[0] != self.state.partition_epoch:
            return committed
        return {*self.state.isr, *self.pending_isr[1]}

    def advance_high_watermark(self, broker_id: int) -> bool:
        """Leader: HW = the smallest log end offset in the maximal ISR (never going back); True if it moved."""
        ends = [self.log.log_end_offset]
        for member in self.maximal_isr():
            if member != broker_id:
                ends.append(self.follower_end.get(member, -1))
        candidate = min(ends)
        before = self.log.high_watermark
        if candidate <= before:
            return False
        self.log.advance_high_watermark(candidate)
        self.wake_produce_waiters()
        self.notify_appended()
        return True


class ReplicaManager:
    def __init__(
        self,
        broker_id: int,
        data_dir: Path,
        *,
        io_threads: int = 8,
        log_defaults: dict[str, str] | None = None,
        fetcher_options: dict[str, int] | None = None,
        incarnation: str = "",
        channels: ChannelPool | None = None,
        lag_time_max_ms: int = 30_000,
        fetch_session_slots: int = 1000,
    ) -> None:
        assert 1 <= io_threads <= 256
        self.broker_id = broker_id
        self.incarnation = incarnation or uuid.uuid4().hex
        self.data_dir = data_dir
        self.log_defaults = dict(log_defaults or {})
        self.partitions: dict[tuple[str, int], Partition] = {}
        self.controller_epoch = -1
        # Incremental fetch sessions (KIP-227): partition key → the sessions holding it.
        self.fetch_watchers: dict[tuple[str, int], set[FetchSession]] = {}
        self.fetch_sessions = FetchSessionCache(
            self.fetch_watchers, slots=fetch_session_slots, on_close=self._session_closed
        )
        # The partitions the ISR check looks at (IsrManager): those we lead whose ISR could change.
        # A partition leaves it once settled (every replica in the ISR, each at our log end through
        # a live session) and comes back on whatever could unsettle it: an append, a state change,
        # a follower's new life, its session going quiet or closing. Idle, the check costs nothing
        # per partition.
        self.isr_watch: set[tuple[str, int]] = set()
        self._unflushed: set[tuple[str, int]] = set()  # appended to since last seen flushed (flush_due)
        self.io_threads = io_threads
        self.lag_time_max_s = lag_time_max_ms / 1000  # replica.lag.time.max.ms
        self.fencing = BrokerFencing(broker_id, self.lag_time_max_s)  # while our etcd session is lost
        self.io = ThreadPoolExecutor(max_workers=io_threads, thread_name_prefix="storage-io")
        self.io_busy = BusyMeter()
        self.cleaner = LogCleaner(lambda: [partition.log for partition in list(self.partitions.values())])
        self.fetchers = ReplicaFetcherManager(
            broker_id, self.run_io, incarnation=self.incarnation, channels=channels, **(fetcher_options or {})
        )
        self.fetchers.on_appended = self._follower_appended
        # Controller requests change replicas one at a time (Kafka's replicaStateChangeLock): a
        # StopReplica deleting a folder must not race a LeaderAndIsr closing the same log.
        self._state_change = asyncio.Lock()

    def _follower_appended(self, key: tuple[str, int]) -> None:
        self._unflushed.add(key)
        partition = self.partitions.get(key)
        if partition is not None:
            partition.notify_appended()

    async def run_io(self, function: Callable[..., T], *args: Any, request: str = "Internal") -> T:
        """`function(*args)` on the I/O pool; the time it waited for a thread is the request's queue
        time (Kafka's RequestQueueTimeMs: a saturated pool shows here first)."""
        submitted = time.perf_counter()

        def timed() -> T:
            started = time.perf_counter()
            QUEUE_TIME_MS.labels(request).observe((started - submitted) * 1000)
            try:
                return function(*args)
            finally:
                self.io_busy.add(time.perf_counter() - started)  # the pool's idle figure (server_metrics)

        return await asyncio.get_running_loop().run_in_executor(self.io, timed)

    # ---- controller requests ---------------------------------------------------------------

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
        async with self._state_change:
            return await self._leader_and_isr(request)

    def _session_closed(self, session: FetchSession) -> None:
        self.isr_watch.update(session.partitions)

    def watch_quiet_sessions(self, quiet_s: float) -> None:
        """Put back in the ISR watch the partitions of sessions with no fetch for `quiet_s`."""
        horizon = time.monotonic() - quiet_s
        for session in self.fetch_sessions.sessions.values():
            if session.last_fetch_s < horizon and not session.quiet:
                session.quiet = True
                self.isr_watch.update(session.partitions)

    def settled(self, hosted: Partition, now: float, quiet_s: float) -> bool:
        """Nothing about `hosted`'s ISR can change until something puts it back in the watch."""
        if hosted.pending_isr is not None or len(hosted.state.isr) != len(hosted.state.replicas):
            return False
        end = hosted.log.log_end_offset
        key = (hosted.topic, hosted.partition)
        for member in hosted.state.isr:
            if member == self.broker_id:
                continue
            session = hosted.follower_sessions.get(member)
            if (
                session is None
                or not session.holds(key)
                or session.last_fetch_s < now - quiet_s
                or hosted.follower_end.get(member, -1) < end
            ):
                return False
        return True

    # ---- fencing on a lost session ------------------------------------------------------------

    def fence(self) -> None:
        """Our etcd session may have expired: arm the fencing (broker_fencing.py). While armed, a
        partition whose in-sync followers stopped fetching is led no more: produce and fetch get
        NOT_LEADER_OR_FOLLOWER, acks=all waiters end with it (their batches may not be kept),
        Metadata is refused (our view is stale), and clients look for the new leader elsewhere
        instead of timing out on us. The HW rule alone already keeps such a leader from
        acknowledging acks=all writes; this is for the clients' sake."""
        self.fencing.session_lost()

    def registered_again(self) -> None:
        """A new session holds our registration: the next whole-state push lifts the fence."""
        self.fencing.registered_again()

    def fenced_out(self, hosted: Partition) -> bool:
        """Fencing is armed and an in-sync follower stopped fetching from us."""
        return self.fencing.fenced_out(hosted.state.isr, hosted.fetched_s)

    def isolated(self) -> bool:
        """Fencing is armed and some partition we led was taken from us (Metadata is refused)."""
        return self.fencing.armed and any(
            hosted.role is ReplicaRole.LEADER and self.fenced_out(hosted) for hosted in list(self.partitions.values())
        )

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
        errors = []
        wanted = set()
        for endpoint in request.live_leaders:
            self.fetchers.endpoints[endpoint.broker_id] = f"{endpoint.host}:{endpoint.port}"
        topic_configs = {  # parsed once per topic, not per partition
            topic: json.loads(request.topic_configs_json.get(topic, "{}"))
            for topic in {state.topic for state in request.partitions}
        }
        opened = await self._open_new_logs(request.partitions, topic_configs)
        new_leaders: dict[tuple[str, int], tuple[Partition, int]] = {}
        for state in request.partitions:
            key = (state.topic, state.partition)
            wanted.add(key)
            try:
                await self._apply_state(state, topic_configs[state.topic], opened.pop(key, None), new_leaders)
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
            await self.run_io(unused.close)
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
        return errors

    async def _open_new_logs(
        self, states: Sequence[common_pb2.PartitionState], topic_configs: dict[str, dict[str, str]]
    ) -> dict[tuple[str, int], PartitionLog]:
        """The logs of replicas new to this broker, opened side by side on the I/O pool (a topic of
        thousands of partitions is mostly file creation, which the threads overlap), a chunk per
        task so the event loop handles a few hundred completions rather than thousands."""
        new = [state for state in states if (state.topic, state.partition) not in self.partitions]
        if len(new) < NEW_LOGS_IN_PARALLEL_MIN:
            return {}
        configs = {
            topic: LogConfig.from_configs({**self.log_defaults, **topic_configs[topic]})
            for topic in {state.topic for state in new}
        }

        def open_chunk(chunk: list[common_pb2.PartitionState]) -> list[tuple[tuple[str, int], PartitionLog]]:
            opened = []
            for state in chunk:
                partition_log = self._open_log_with(state.topic, state.partition, state.topic_id, configs[state.topic])
                if state.leader == self.broker_id:
                    # Here, side by side on the I/O threads, rather than one I/O task after
                    # another in _apply_state (a new topic makes thousands of leaders at once).
                    partition_log.assign_leader_epoch(state.leader_epoch)
                opened.append(((state.topic, state.partition), partition_log))
            return opened

        chunks = await asyncio.gather(*(self.run_io(open_chunk, chunk) for chunk in self._io_chunks(new)))
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
        await asyncio.gather(*(self.run_io(start_chunk, chunk) for chunk in self._io_chunks(hosted)))

    async def _apply_state(
        self,
        state: common_pb2.PartitionState,
        configs: dict[str, str],
        opened: PartitionLog | None,
        new_leaders: dict[tuple[str, int], tuple[Partition, int]],
    ) -> None:
        """Take one partition's state. A leadership in a new epoch goes into `new_leaders`, whose
        epochs the caller starts for all of them at once (`_start_leader_epochs`)."""
        key = (state.topic, state.partition)
        existing = self.partitions.get(key)
        if existing is not None and existing.topic_id == state.topic_id:
            if state == existing.state and configs == existing.configs:
                return  # told again what we hold (a new controller's first, whole push): nothing to do
            if state.partition_epoch < existing.state.partition_epoch:
                raise RemoteError(
                    ErrorCode.FENCED_LEADER_EPOCH,
                    f"partition epoch {state.partition_epoch} is older than {existing.state.partition_epoch}",
                )
            existing.move_to(state, self.broker_id)
            if configs != existing.configs:  # whole state arrives at every change: act on real changes only
                new_config = LogConfig.from_configs({**self.log_defaults, **configs})
                await self.run_io(existing.log.update_config, new_config)  # waits for the log's lock
                existing.configs = configs
        else:
            if existing is not None:  # the topic was deleted and created again under the same name
                await self._stop(key, delete=True)
            partition_log: PartitionLog = (
                opened
                if opened is not None
                else await self.run_io(self._open_log, state.topic, state.partition, state.topic_id, configs)
            )
            existing = Partition(
                state.topic,
                state.partition,
                state.topic_id,
                partition_log,
                state,
                role_in(state, self.broker_id),
                configs=configs,
                watchers=self.fetch_watchers,
            )
            self.partitions[key] = existing
        if existing.role is ReplicaRole.LEADER:
            self.fetchers.unfollow(key)
            if existing.log.leader_epochs.latest_epoch < state.leader_epoch:
                existing.forget_followers()
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
        existing.notify_appended()
        if existing.role is ReplicaRole.LEADER:
            self.isr_watch.add(key)

    def _open_log(self, topic: str, partition: int, topic_id: str, configs: dict[str, str]) -> PartitionLog:
        config = LogConfig.from_configs({**self.log_defaults, **configs})
        return self._open_log_with(topic, partition, topic_id, config)

    def _open_log_with(self, topic: str, partition: int, topic_id: str, config: LogConfig) -> PartitionLog:
        directory = self.data_dir / f"{topic}-{partition}"
        marker = directory / PARTITION_METADATA_FILE
        try:  # new to this broker, the common case: no recovery to run, only files to create
            partition_log = PartitionLog.create(directory, config)
        except FileExistsError:
            pass
        else:
            _write_marker(marker, topic_id)
            return partition_log
        if not marker.exists() or marker.read_text().strip() != f"topic_id: {topic_id}":
            log.warning("stale_log_replaced", topic=topic, partition=partition)
            shutil.rmtree(directory)
        partition_log = PartitionLog.open(directory, config)
        if not marker.exists():
            _write_marker(marker, topic_id)
        return partition_log

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
        self.isr_watch.add((state.topic, state.partition))

    async def stop_replicas(self, request: broker_pb2.StopReplicaRequest) -> None:
        async with self._state_change:
            self.check_controller_epoch(request.controller_epoch)
            self.check_incarnation(request.broker_incarnation)
            for state in request.partitions:
                await self._stop((state.topic, state.partition), delete=request.delete_partitions)

    async def _stop(self, key: tuple[str, int], *, delete: bool) -> None:
        self.fetchers.unfollow(key)
        partition = self.partitions.pop(key, None)
        if partition is None:
            if delete:
                await self.run_io(shutil.rmtree, self.data_dir / f"{key[0]}-{key[1]}", True)
            return
        partition.delete()
        partition.notify_appended()
        partition.wake_produce_waiters()
        await self.run_io(partition.log.delete if delete else partition.log.close)

    # ---- data path -------------------------------------------------------------------------

    def leader_partition(self, topic: str, partition: int) -> Partition:
        hosted = self.partitions.get((topic, partition))
        if hosted is None:
            raise UnknownTopicOrPartitionError(f"this broker hosts no replica of {topic}-{partition}")
        if hosted.role is not ReplicaRole.LEADER:
            raise NotLeaderOrFollowerError(f"broker {self.broker_id} is not the leader of {topic}-{partition}")
        if self.fenced_out(hosted):
            raise NotLeaderOrFollowerError(
                f"broker {self.broker_id} lost its etcd session and its followers: "
                f"it may no longer lead {topic}-{partition}"
            )
        return hosted

    async def append(
        self, topic: str, partition: int, batches: bytes, *, acks: int = 1, timeout_s: float = 30.0
    ) -> AppendInfo:
        """Append as leader; with acks=-1 return once the whole ISR has it (the HW passed it)."""
        hosted = self.leader_partition(topic, partition)
        min_insync = hosted.log.config.min_insync_replicas
        if acks == -1 and len(hosted.state.isr) < min_insync:
            raise NotEnoughReplicasError(
                f"{topic}-{partition} has {len(hosted.state.isr)} in-sync replicas; min.insync.replicas={min_insync}"
            )
        leader_epoch = hosted.state.leader_epoch
        started = time.perf_counter()
        info: AppendInfo = await self.run_io(hosted.log.append_as_leader, batches, leader_epoch, request="Produce")
        if not hosted.advance_high_watermark(self.broker_id):  # a moved HW already woke the waiters
            hosted.notify_appended()
        appended = time.perf_counter()
        self.isr_watch.add((topic, partition))  # its followers are behind until they fetch it
        self._unflushed.add((topic, partition))
        LOCAL_TIME_MS.labels("Produce").observe((appended - started) * 1000)
        if acks == -1:
            await self._wait_replicated(hosted, leader_epoch, info.last_offset + 1, timeout_s)
            REMOTE_TIME_MS.labels("Produce").observe((time.perf_counter() - appended) * 1000)
            if len(hosted.state.isr) < min_insync:
                raise RemoteError(
                    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
                    f"{topic}-{partition}: the ISR shrank below min.insync.replicas after the append",
                )
        meters = topic_meters(topic)
        meters.bytes_in.inc(info.bytes)
        meters.messages_in.inc(info.last_offset - info.first_offset + 1)
        return info

    def read(
        self, fetch: broker_pb2.FetchPartition, max_bytes: int, min_one_batch: bool, *, follower: bool = False
    ) -> PartitionRead:
        """One partition of a fetch (runs on the I/O pool). Errors come back in the result.

        Consumers read below the high watermark; followers up to the log end.
        """
        meters = topic_meters(fetch.topic)
        meters.total_fetch.inc()
        try:
            hosted = self.leader_partition(fetch.topic, fetch.partition)
            partition_log = hosted.log
            limit = min(max_bytes, fetch.partition_max_bytes) if fetch.partition_max_bytes > 0 else max_bytes
            high_watermark = partition_log.high_watermark
            upto = partition_log.log_end_offset if follower else high_watermark
            data = partition_log.read(fetch.fetch_offset, limit, max_offset=upto, min_one_batch=min_one_batch)
            meters.bytes_out.inc(len(data))
            return PartitionRead(
                fetch.topic,
                fetch.partition,
                bytes(data),
                high_watermark,
                partition_log.log_start_offset,
                partition_log.log_end_offset,
            )
        except TidelogError as error:
            meters.failed_fetch.inc()
            return PartitionRead(fetch.topic, fetch.partition, b"", -1, -1, -1, int(error.code), error.message)

    def leads_in(self, hosted: Partition, leader_epoch: int) -> bool:
        """This broker still leads `hosted`, in `leader_epoch`, and hosts that very replica."""
        return (
            hosted.role is ReplicaRole.LEADER
            and not self.fenced_out(hosted)
            and hosted.state.leader_epoch == leader_epoch
            and self.partitions.get((hosted.topic, hosted.partition)) is hosted
        )

    async def _wait_replicated(self, hosted: Partition, leader_epoch: int, offset: int, timeout_s: float) -> None:
        """Return once the HW passed `offset` while this broker led in `leader_epoch` all along.

        As Kafka's DelayedProduce: leadership is checked before the HW, at every wake-up. A leader
        deposed while it waits may come back as a follower, truncate the very batch it appended,
        fetch another one into the same offsets and see its HW pass them: the offset would then be
        someone else's record. Within one leader epoch the leader's log is never truncated, so
        "still leader in the same epoch and HW past the offset" means this batch is committed.
        """
        deadline = asyncio.get_running_loop().time() + timeout_s
        while True:
            if self.fenced_out(hosted):
                raise NotLeaderOrFollowerError(
                    f"{hosted.topic}-{hosted.partition}: broker {self.broker_id} lost its etcd session and its "
                    "followers during the wait; the batch may not be kept"
                )
            if not self.leads_in(hosted, leader_epoch):
                raise NotLeaderOrFollowerError(
                    f"{hosted.topic}-{hosted.partition}: leader epoch {leader_epoch} ended during the wait "
                    f"(leader now {hosted.leader}, epoch {hosted.state.leader_epoch}); the batch may not be kept"
                )
            if hosted.log.high_watermark >= offset:
                return
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                raise RequestTimedOutError(f"{hosted.topic}-{hosted.partition}: the ISR did not replicate in time")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(hosted.high_watermark_moved.wait(), min(remaining, 0.5))

    def record_follower_fetch(
        self,
        replica_id: int,
        incarnation: str,
        fetches: list[broker_pb2.FetchPartition],
        session: FetchSession | None = None,
    ) -> dict[tuple[str, int], int]:
        """Leader: note each follower's position; errors (by partition) for fetches it must refuse."""
        errors: dict[tuple[str, int], int] = {}
        now = time.monotonic()
        for fetch in fetches:
            key = (fetch.topic, fetch.partition)
            hosted = self.partitions.get(key)
            if hosted is None or hosted.role is not ReplicaRole.LEADER:
                continue  # answered as NOT_LEADER / UNKNOWN by the read
            if fetch.current_leader_epoch >= 0 and fetch.current_leader_epoch != hosted.state.leader_epoch:
                errors[key] = int(
                    ErrorCode.FENCED_LEADER_EPOCH
                    if fetch.current_leader_epoch < hosted.state.leader_epoch
                    else ErrorCode.UNKNOWN_LEADER_EPOCH
                )
                continue
            if replica_id not in hosted.state.replicas:
                continue
            if hosted.follower_incarnation.get(replica_id) != incarnation:
                self.isr_watch.add(key)  # a new life: judged afresh
            hosted.note_follower_fetch(replica_id, incarnation, fetch.fetch_offset, now, session)
            hosted.advance_high_watermark(self.broker_id)
        return errors

    def end_offset_for_epoch(self, query: broker_pb2.EpochQuery) -> broker_pb2.EpochEndOffset:
        answer = broker_pb2.EpochEndOffset(topic=query.topic, partition=query.partition, leader_epoch=-1, end_offset=-1)
        try:
            hosted = self.leader_partition(query.topic, query.partition)
        except TidelogError as error:
            answer.error_code = int(error.code)
            return answer
        if query.current_leader_epoch >= 0 and query.current_leader_epoch != hosted.state.leader_epoch:
            answer.error_code = int(
                ErrorCode.FENCED_LEADER_EPOCH
                if query.current_leader_epoch < hosted.state.leader_epoch
                else ErrorCode.UNKNOWN_LEADER_EPOCH
            )
            return answer
        answer.leader_epoch, answer.end_offset = hosted.log.end_offset_for_epoch(query.leader_epoch)
        return answer

    def append_events(self, keys: list[tuple[str, int]]) -> list[asyncio.Event]:
        """The events the next append (or change) of these partitions will set.

        Take them *before* reading: an append while the read runs on the I/O pool then still wakes
        the waiter (taken after, that append's wake-up would be lost and the fetch sleep its whole
        max_wait_ms).
        """
        return [self.partitions[key].appended for key in keys if key in self.partitions]

    async def wait_for_append(self, events: list[asyncio.Event], timeout_s: float) -> None:
        """Return when any of `events` (from append_events) is set, or after `timeout_s`."""
        if not events or timeout_s <= 0:
            return
        waits = [asyncio.ensure_future(event.wait()) for event in events]
        try:
            await asyncio.wait(waits, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()

    # ---- housekeeping ----------------------------------------------------------------------

    def flush_due(self) -> None:
        """Flush the logs flush.ms says are due, among those appended to since they were last
        flushed (not every log: an idle broker does nothing per partition here)."""
        for key in list(self._unflushed):  # list(): one C call, while the event loop adds keys
            partition = self.partitions.get(key)
            if partition is not None:
                partition.log.maybe_flush()
                if partition.log.has_unflushed:
                    continue
            self._unflushed.discard(key)

    def apply_retention(self) -> int:
        return sum(partition.log.apply_retention() for partition in list(self.partitions.values()))

    def expire_producers(self, expiration_ms: int) -> int:
        return sum(partition.log.expire_producers(expiration_ms) for partition in list(self.partitions.values()))

    def _io_chunks(self, items: list[T]) -> list[list[T]]:
        """`items` cut for the I/O threads to share: at most LOGS_PER_TASK each, all threads busy."""
        step = max(1, min(LOGS_PER_TASK, len(items) // self.io_threads))
        return [items[i : i + step] for i in range(0, len(items), step)]

    async def close(self) -> None:
        self.fetch_sessions.close_all()
        await self.fetchers.close()
        self.cleaner.stop()
        logs = [partition.log for partition in self.partitions.values()]
        self.partitions.clear()

        def close_chunk(chunk: list[PartitionLog]) -> None:
            for partition_log in chunk:
                partition_log.close()

        # Side by side on the I/O threads: each close fsyncs, and one after another 10,000 logs
        # took longer than a stop may take (the process was killed, and recovered them all next time).
        await asyncio.gather(*(self.run_io(close_chunk, chunk) for chunk in self._io_chunks(logs)))
        self.io.shutdown(wait=True)


def _write_marker(marker: Path, topic_id: str) -> None:
    """partition.metadata: which topic (by id) the log belongs to, so one of a deleted topic is
    never taken for a new topic's of the same name."""
    descriptor = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(descriptor, f"topic_id: {topic_id}\n".encode())
    finally:
        os.close(descriptor)
