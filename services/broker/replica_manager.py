"""The partitions a broker hosts and the data path through them (Kafka's ReplicaManager): append as
leader (acks=0/1/all), read for consumers and followers, answer epoch queries, and the periodic
flush, retention and producer expiry.

The replica manager builds and holds the broker's replication parts, each a module of its own:
- `partition.py`: one hosted replica (its log, leadership, followers' positions, the HW);
- `partition_states.py`: the controller's requests (LeaderAndIsr, StopReplica, committed ISRs);
- `follower_tracking.py`: the followers' fetches as the leader sees them, and the ISR watch;
- `replica_fetcher.py`: this broker's fetches as a follower;
- `broker_fencing.py`: the fencing while the etcd session is lost (ADR 0013);
- `storage_io.py`: the bounded thread pool every disk operation runs on (`num.io.threads`).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TypeVar

import structlog

from tidelog.broker.broker_fencing import BrokerFencing
from tidelog.broker.clean_shutdown import CleanShutdown
from tidelog.broker.fetch_session import FetchSession, FetchSessionCache
from tidelog.broker.follower_tracking import FollowerTracking
from tidelog.broker.leader_appends import (
    CoordinatorWrite,
    LeaderAppend,
    MarkerWrite,
    append_leader_groups,
    append_small_groups_here,
)
from tidelog.broker.partition import Partition, PartitionKey, PartitionRead
from tidelog.broker.partition_states import PartitionStates
from tidelog.broker.replica_fetcher import ReplicaFetcherManager
from tidelog.broker.replica_role import ReplicaRole
from tidelog.broker.request_metrics import LOCAL_TIME_MS, REMOTE_TIME_MS
from tidelog.broker.storage import AppendInfo, LogCleaner, PartitionLog
from tidelog.broker.storage.checkpoint import sync_filesystems
from tidelog.broker.storage_io import StorageIo
from tidelog.broker.topic_metrics import topic_meters
from tidelog.common.channels import ChannelPool
from tidelog.common.clock import Monotonic, monotonic
from tidelog.common.errors import (
    ErrorCode,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    RemoteError,
    RequestTimedOutError,
    TidelogError,
    UnknownTopicOrPartitionError,
)
from tidelog.common.record.batch import iter_headers
from tidelog.common.settings import BrokerSettings
from tidelog.v1 import broker_pb2

__all__ = ["CoordinatorWrite", "MarkerWrite", "ReplicaManager"]

log = structlog.get_logger(__name__)


_Item = TypeVar("_Item")


def in_rounds(items: Iterable[_Item], partition_of: Callable[[_Item], PartitionKey]) -> list[list[_Item]]:
    """`items` as `append_rounds` takes them: a partition at most once a round, its items a round
    each in their order (a produce request's batches, a WriteTxnMarkers request's markers)."""
    rounds: list[list[_Item]] = []
    turns: dict[PartitionKey, int] = {}
    for item in items:
        key = partition_of(item)
        turn = turns[key] = turns.get(key, -1) + 1
        if turn == len(rounds):
            rounds.append([])
        rounds[turn].append(item)
    return rounds


class ReplicaManager:
    def __init__(
        self,
        broker_id: int,
        data_dir: Path,
        settings: BrokerSettings,
        *,
        log_defaults: dict[str, str] | None = None,
        incarnation: str = "",
        channels: ChannelPool | None = None,
        clock: Monotonic = monotonic,
    ) -> None:
        self.broker_id = broker_id
        self.incarnation = incarnation or uuid.uuid4().hex
        self.data_dir = data_dir
        self.settings = settings
        self.clock = clock
        self.partitions: dict[PartitionKey, Partition] = {}
        self.io = StorageIo(settings.num_io_threads)
        self.long_polls_ended = asyncio.Event()  # set when stopping: no fetch waits for data any more
        # Incremental fetch sessions (KIP-227): partition key → the sessions holding it.
        self.fetch_watchers: dict[PartitionKey, set[FetchSession]] = {}
        self.fetch_sessions = FetchSessionCache(
            self.fetch_watchers, slots=settings.max_incremental_fetch_session_cache_slots, clock=clock
        )
        self.followers = FollowerTracking(broker_id, self.partitions, self.fetch_sessions, clock)
        self.fencing = BrokerFencing(broker_id, settings.replica_lag_time_max_ms / 1000, clock=clock)
        self.fetchers = ReplicaFetcherManager(
            broker_id, self.io, settings, incarnation=self.incarnation, channels=channels, clock=clock
        )
        self.fetchers.on_appended = self._follower_appended
        self.clean_shutdown = CleanShutdown(data_dir)  # which logs the last stop closed cleanly
        self.states = PartitionStates(
            broker_id,
            self.incarnation,
            data_dir,
            dict(log_defaults or {}),
            partitions=self.partitions,
            watchers=self.fetch_watchers,
            io=self.io,
            fetchers=self.fetchers,
            followers=self.followers,
            fencing=self.fencing,
            clean_shutdown=self.clean_shutdown,
            clock=clock,
        )
        self.cleaner = LogCleaner(lambda: [partition.log for partition in list(self.partitions.values())])
        self._unflushed: set[PartitionKey] = set()  # appended to since last seen flushed (flush_due)

    def _follower_appended(self, key: PartitionKey) -> None:
        partition = self.partitions.get(key)
        if partition is not None:
            self._note_unflushed(key, partition.log)
            partition.notify_appended()

    def _note_unflushed(self, key: PartitionKey, partition_log: PartitionLog) -> None:
        """For `flush_due`: only a log with flush.ms set can come due by time (flush.messages flushes
        in the append itself). At the default, 10,000 partitions once written to were walked every
        log.flush.scheduler.interval.ms for nothing: 35 ms of CPU each second, per broker, for good."""
        if partition_log.config.flushes_by_time:
            self._unflushed.add(key)

    # ---- fencing on a lost session ------------------------------------------------------------

    def fenced_out(self, hosted: Partition) -> bool:
        """Fencing is armed (our etcd session may have expired, broker_fencing.py) and an in-sync
        follower stopped fetching from us: produce and fetch get NOT_LEADER_OR_FOLLOWER, acks=all
        waiters end with it, and clients look for the new leader elsewhere instead of timing out on
        us. The HW rule alone already keeps such a leader from acknowledging acks=all writes; this
        is for the clients' sake."""
        return self.fencing.fenced_out(hosted.state.isr, hosted.fetched_s)

    def isolated(self) -> bool:
        """Fencing is armed and some partition we led was taken from us (Metadata is refused)."""
        return self.fencing.armed and any(
            hosted.role is ReplicaRole.LEADER and self.fenced_out(hosted) for hosted in list(self.partitions.values())
        )

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
        (outcome,) = await self.append_all([(topic, partition, batches)], acks=acks, timeout_s=timeout_s)
        if isinstance(outcome, TidelogError):
            raise outcome
        return outcome

    async def append_all(
        self,
        entries: Sequence[tuple[str, int, bytes | MarkerWrite | CoordinatorWrite]],
        *,
        acks: int = 1,
        timeout_s: float = 30.0,
    ) -> list[AppendInfo | TidelogError]:
        """`append` for many partitions, each at most once, with an outcome each. The appends share
        a few I/O tasks (a thread hop per partition was most of a produce's time at thousands of
        partitions) and, with acks=-1, the ISRs are waited for together. An entry is a producer's
        batches or a transaction marker."""
        (outcomes,) = await self.append_rounds([entries], acks=acks, timeout_s=timeout_s)
        return outcomes

    async def append_rounds(
        self,
        rounds: Sequence[Sequence[tuple[str, int, bytes | MarkerWrite | CoordinatorWrite]]],
        *,
        acks: int = 1,
        timeout_s: float = 30.0,
        on_appended: Callable[[], None] | None = None,
    ) -> list[list[AppendInfo | TidelogError]]:
        """`append_all` for rounds of entries, a partition at most once a round (its entries a round
        each, in order); with acks=-1 the ISRs are waited for once, after the last round (a wait a
        round took 8 batches of one partition 8 follower round trips)."""
        started = time.perf_counter()
        outcomes, all_appends = await self._append_locally(rounds, acks)
        appended = time.perf_counter()
        LOCAL_TIME_MS.labels("Produce").observe((appended - started) * 1000)
        if on_appended is not None:
            on_appended()
        if acks == -1 and (waits := [a for round_ in all_appends for a in round_ if isinstance(a.outcome, AppendInfo)]):
            await asyncio.gather(*(self._replicated(append, timeout_s) for append in waits))
            REMOTE_TIME_MS.labels("Produce").observe((time.perf_counter() - appended) * 1000)
        answered: list[list[AppendInfo | TidelogError]] = []
        for round_outcomes, appends in zip(outcomes, all_appends, strict=True):
            for append in appends:
                if isinstance(append.outcome, AppendInfo):
                    meters = topic_meters(append.hosted.topic)
                    meters.bytes_in.inc(append.outcome.bytes)
                    meters.messages_in.inc(append.outcome.last_offset - append.outcome.first_offset + 1)
                assert isinstance(append.outcome, AppendInfo | TidelogError)
                round_outcomes[append.index] = append.outcome
            answered.append([outcome for outcome in round_outcomes if outcome is not None])
            assert len(answered[-1]) == len(round_outcomes), "every entry has its outcome"
        return answered

    async def _append_locally(
        self, rounds: Sequence[Sequence[tuple[str, int, bytes | MarkerWrite | CoordinatorWrite]]], acks: int
    ) -> tuple[list[list[AppendInfo | TidelogError | None]], list[list[LeaderAppend]]]:
        """Every round's appends to the leaders' logs, high watermarks moved and followers woken: per
        round, the outcomes known before any wait (refusals) and the appends made. One pass of I/O
        tasks, a partition's entries on one thread in order: a hop a round (each waits for the GIL
        and the loop) cost 8 batches of one partition 7.7 ms of local time for 0.4 ms of appends."""
        outcomes: list[list[AppendInfo | TidelogError | None]] = []
        all_appends: list[list[LeaderAppend]] = []
        by_partition: dict[PartitionKey, list[LeaderAppend]] = {}
        for entries in rounds:
            assert len({(topic, partition) for topic, partition, _ in entries}) == len(entries), "one entry a partition"
            round_outcomes: list[AppendInfo | TidelogError | None] = [None] * len(entries)
            appends: list[LeaderAppend] = []
            for index, (topic, partition, batches) in enumerate(entries):
                try:
                    hosted = self.leader_partition(topic, partition)
                    min_insync = hosted.log.config.min_insync_replicas
                    if acks == -1 and len(hosted.state.isr) < min_insync:
                        raise NotEnoughReplicasError(
                            f"{topic}-{partition} has {len(hosted.state.isr)} in-sync replicas; "
                            f"min.insync.replicas={min_insync}"
                        )
                except TidelogError as error:
                    round_outcomes[index] = error
                    continue
                append = LeaderAppend(index, hosted, hosted.state.leader_epoch, batches)
                appends.append(append)
                by_partition.setdefault((topic, partition), []).append(append)
            outcomes.append(round_outcomes)
            all_appends.append(appends)
        if by_partition:
            if later := append_small_groups_here(list(by_partition.values())):
                await self.io.each_chunk(append_leader_groups, later, request="Produce")
            else:
                self.io.ran_here("Produce")
        unexpected: BaseException | None = None
        for key, appends in by_partition.items():
            firsts = [
                a.outcome.first_offset for a in appends if isinstance(a.outcome, AppendInfo) and not a.outcome.duplicate
            ]
            if firsts:
                hosted = appends[0].hosted
                hosted.note_log_end_moved(min(firsts))
                if not hosted.advance_high_watermark(self.broker_id):  # a moved HW already woke the waiters
                    hosted.notify_appended()
                self.followers.appended(key)
                self._note_unflushed(key, hosted.log)
            for append in appends:
                if not isinstance(append.outcome, AppendInfo | TidelogError):
                    unexpected = unexpected or append.outcome  # a bug or a disk error: the request fails, as before
        if unexpected is not None:
            raise unexpected
        return outcomes, all_appends

    async def _replicated(self, append: LeaderAppend, timeout_s: float) -> None:
        """An acks=-1 append's wait for its ISR; a failed wait becomes its outcome."""
        hosted = append.hosted
        assert isinstance(append.outcome, AppendInfo)
        try:
            await self._wait_replicated(hosted, append.leader_epoch, append.outcome.last_offset + 1, timeout_s)
            if len(hosted.state.isr) < hosted.log.config.min_insync_replicas:
                raise RemoteError(
                    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
                    f"{hosted.topic}-{hosted.partition}: the ISR shrank below min.insync.replicas after the append",
                )
        except TidelogError as error:
            append.outcome = error

    def read(
        self,
        fetch: broker_pb2.FetchPartition,
        max_bytes: int,
        min_one_batch: bool,
        *,
        follower: bool = False,
        read_committed: bool = False,
    ) -> PartitionRead:
        """One partition of a fetch (runs on the I/O pool). Errors come back in the result.

        Consumers read below the high watermark (read_committed: the last stable offset, with the
        aborted transactions among what they read); followers up to the log end.
        """
        meters = topic_meters(fetch.topic)
        meters.total_fetch.inc()
        try:
            hosted = self.leader_partition(fetch.topic, fetch.partition)
            partition_log = hosted.log
            limit = min(max_bytes, fetch.partition_max_bytes) if fetch.partition_max_bytes > 0 else max_bytes
            high_watermark = partition_log.high_watermark
            stable = partition_log.last_stable_offset
            upto = partition_log.log_end_offset if follower else stable if read_committed else high_watermark
            data = partition_log.read(fetch.fetch_offset, limit, max_offset=upto, min_one_batch=min_one_batch)
            aborted: tuple[tuple[int, int], ...] = ()
            if read_committed and data:
                *_, (_, last) = iter_headers(data)
                found = partition_log.aborted_transactions(fetch.fetch_offset, last.next_offset)
                aborted = tuple((entry.producer_id, entry.first_offset) for entry in found)
            meters.bytes_out.inc(len(data))
            return PartitionRead(
                fetch.topic,
                fetch.partition,
                bytes(data),
                high_watermark,
                partition_log.log_start_offset,
                partition_log.log_end_offset,
                last_stable_offset=stable,
                aborted=aborted,
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
                # Said loudly: a leader that kept its epoch and whose HW stood still for a whole
                # request timeout is a stuck follower or ISR change, which a fault test should show.
                log.warning(
                    "produce_replication_timed_out",
                    topic=hosted.topic,
                    partition=hosted.partition,
                    leader_epoch=leader_epoch,
                    waited_for=offset,
                    high_watermark=hosted.log.high_watermark,
                    log_end=hosted.log.log_end_offset,
                    isr=list(hosted.state.isr),
                    maximal_isr=sorted(hosted.maximal_isr()),
                    follower_ends=dict(hosted.follower_end),
                    timeout_s=timeout_s,
                )
                raise RequestTimedOutError(f"{hosted.topic}-{hosted.partition}: the ISR did not replicate in time")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(hosted.high_watermark_moved.wait(), min(remaining, 0.5))

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

    def append_events(self, keys: list[PartitionKey]) -> list[asyncio.Event]:
        """The events the next append (or change) of these partitions will set.

        Take them *before* reading: an append while the read runs on the I/O pool then still wakes
        the waiter (taken after, that append's wake-up would be lost and the fetch sleep its whole
        max_wait_ms).
        """
        return [self.partitions[key].appended for key in keys if key in self.partitions]

    async def wait_for_append(self, events: list[asyncio.Event], timeout_s: float) -> None:
        """Return when any of `events` (from append_events) is set, or after `timeout_s`."""
        if not events or timeout_s <= 0 or self.long_polls_ended.is_set():
            return
        waits = [asyncio.ensure_future(event.wait()) for event in [*events, self.long_polls_ended]]
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

    def end_long_polls(self) -> None:
        """Stopping: every fetch waiting for data answers now, and none waits from here on. The
        server's stop otherwise waits for them (replica.fetch.wait.max.ms, fetch.max.wait.ms) and
        the followers' and consumers' next fetch goes elsewhere anyway."""
        self.long_polls_ended.set()
        self.fetch_sessions.close_all()

    async def close(self) -> None:
        await self.states.finish_changes()  # a change cut from its caller still opens and moves logs
        self.fetch_sessions.close_all()
        await self.fetchers.close()
        self.cleaner.stop()
        logs = [partition.log for partition in self.partitions.values()]
        self.partitions.clear()

        def close_chunk(chunk: list[PartitionLog]) -> None:
            for partition_log in chunk:
                partition_log.close(sync=False)

        def finish_chunk(chunk: list[PartitionLog]) -> None:
            for partition_log in chunk:
                partition_log.finish_close(marker=False)  # named in the data directory's list instead

        # Every log written out, one sync of the file system, every log's checkpoints and the
        # list of logs closed cleanly, one more sync. A sync per log (its data, indexes and epoch
        # history, each fsynced) took 2.5-3.5 s at 10,000 partitions, three brokers stopping at
        # once; a clean-shutdown marker per log folder, 0.3 ms a file here, took seconds more.
        folders = {partition_log.directory.parent for partition_log in logs}
        steps = [time.monotonic()]
        for step in (
            self.io.each_chunk(close_chunk, logs),
            self.io.run(sync_filesystems, folders),
            self.io.each_chunk(finish_chunk, logs),
            self.io.run(self.clean_shutdown.write, [partition_log.directory.name for partition_log in logs]),
            self.io.run(sync_filesystems, folders | {self.data_dir}),
        ):
            await step
            steps.append(time.monotonic())
        # (a sync waits for everything dirty on the file system, other processes' writes too)
        log.info("logs_closed", logs=len(logs), seconds=[round(b - a, 3) for a, b in itertools.pairwise(steps)])
        self.io.shutdown()
