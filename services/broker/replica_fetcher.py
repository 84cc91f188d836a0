"""Followers pull from leaders: one fetcher task per leader broker, many partitions per request.

A partition that starts following (any LeaderAndIsr making this broker a follower) first truncates
by leader epoch (KIP-101/279): it asks the leader where its own latest epoch ended
(OffsetsForLeaderEpoch) and cuts its log at the smaller of that and its own end of that epoch, so a
returning replica drops exactly what diverged — never acknowledged data the leader has, and never
keeps records the leader does not. Then it fetches from its log end offset, appends the leader's
batches as they are (offsets and epochs included) and takes the leader's high watermark, capped at
its own log end. The leader learns the follower's log end and log start from each fetch.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
from collections.abc import Callable
from typing import Any, Final

import grpc
import structlog

from tidelog.broker.follower_io import EpochAnswer, FollowedPartition, append_fetched, cut, needs_cut, sync_cuts
from tidelog.broker.follower_session import FollowerSession
from tidelog.broker.storage_io import BULK_CHUNKS_AT_ONCE, StorageIo
from tidelog.common.channels import ChannelPool
from tidelog.common.clock import Monotonic, monotonic
from tidelog.common.errors import ErrorCode, TidelogError
from tidelog.common.settings import BrokerSettings
from tidelog.server_common import metrics_catalog
from tidelog.server_common.loop_slices import LoopSlices
from tidelog.v1 import broker_pb2, broker_pb2_grpc

__all__ = ["FollowedPartition", "ReplicaFetcherManager"]

log = structlog.get_logger(__name__)

# A refused epoch query is asked again this soon, then twice as late each time up to
# replica.fetch.backoff.ms. The usual refusal is a race: the controller tells leader and followers
# at once, and a follower's query can reach the new leader before its own LeaderAndIsr does; it
# then leads milliseconds later, and a follower that waited the whole backoff stalled every acks=all
# produce of the partition as long (a controlled shutdown's gap).
EPOCH_QUERY_RETRY_FIRST_S: Final = 0.005
# Per-partition fetch errors that mean the leadership moved on (or has yet to reach the leader):
# resolved by the next LeaderAndIsr, they hold back that partition alone.
LEADERSHIP_ERRORS: Final = frozenset(
    {
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    }
)
APPEND_MS: Final = metrics_catalog.histogram(
    "tidelog_replica_fetch_append_ms", buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 1000)
)


class ReplicaFetcherManager:
    def __init__(
        self,
        broker_id: int,
        io: StorageIo,
        settings: BrokerSettings,
        *,
        incarnation: str = "",
        channels: ChannelPool | None = None,
        clock: Monotonic = monotonic,
    ) -> None:
        self.broker_id = broker_id
        self.incarnation = incarnation
        self.io = io  # the broker's I/O pool: appends, truncations
        self.settings = settings  # replica.fetch.{wait.max.ms,max.bytes,response.max.bytes,backoff.ms}
        self.clock = clock
        self.backoff_s = settings.replica_fetch_backoff_ms / 1000
        self.endpoints: dict[int, str] = {}
        self.followed: dict[tuple[str, int], FollowedPartition] = {}
        self._by_leader: dict[int, dict[tuple[str, int], FollowedPartition]] = {}  # the same, by leader
        self._untruncated: dict[int, set[tuple[str, int]]] = {}  # by leader: KIP-279 truncation to do
        self._cutting: dict[int, set[tuple[str, int]]] = {}  # by leader: ... under way (_cut)
        self._cuts: set[asyncio.Task[None]] = set()
        self._query_after: dict[tuple[str, int], float] = {}  # refused epoch queries: not before then
        self._query_delay: dict[tuple[str, int], float] = {}  # ... and the delay that set it
        self._wakeups: dict[int, asyncio.Event] = {}  # by leader: its partitions changed
        self._polling: dict[int, asyncio.Future[broker_pb2.FetchResponse]] = {}  # by leader: the fetch in flight
        self._interrupted: set[int] = set()  # leaders whose fetch in flight follow() cancelled
        self._fetchers: dict[int, asyncio.Task[None]] = {}
        self._sessions: dict[int, FollowerSession] = {}  # by leader
        self._channels = channels or ChannelPool()
        self.on_appended: Callable[[tuple[str, int]], None] = lambda key: None

    def follow(self, followed: FollowedPartition) -> None:
        key = (followed.topic, followed.partition)
        current = self.followed.get(key)
        if current is not None and (current.leader, current.leader_epoch) == (followed.leader, followed.leader_epoch):
            return
        if current is not None:
            self.unfollow(key)
        self.followed[key] = followed
        self._by_leader.setdefault(followed.leader, {})[key] = followed
        self._untruncated.setdefault(followed.leader, set()).add(key)
        self._changed(followed.leader, key)
        self._wakeups.setdefault(followed.leader, asyncio.Event()).set()
        self._interrupt(followed.leader)
        self._ensure_fetcher(followed.leader)

    def _interrupt(self, leader: int) -> None:
        """End the long poll in flight to `leader`, if one is: a partition newly followed from it
        is fetched only by the next request, and a long poll over idle partitions holds that back
        for up to replica.fetch.wait.max.ms, with every acks=all produce of the partition waiting
        as long (a controlled shutdown moving leaderships to brokers we already fetch from)."""
        polling = self._polling.get(leader)
        if polling is not None and not polling.done():
            self._interrupted.add(leader)
            polling.cancel()

    def unfollow(self, key: tuple[str, int]) -> None:
        followed = self.followed.pop(key, None)
        if followed is None:
            return
        self._by_leader.get(followed.leader, {}).pop(key, None)
        self._untruncated.get(followed.leader, set()).discard(key)
        self._query_after.pop(key, None)
        self._query_delay.pop(key, None)
        self._changed(followed.leader, key)
        self._wakeups.setdefault(followed.leader, asyncio.Event()).set()

    def _changed(self, leader: int, key: tuple[str, int]) -> None:
        session = self._sessions.get(leader)
        if session is not None:
            session.changed.add(key)

    def _ensure_fetcher(self, leader: int) -> None:
        task = self._fetchers.get(leader)
        if task is None or task.done():
            self._fetchers[leader] = asyncio.create_task(self._run(leader), name=f"replica-fetcher-{leader}")

    def _stub(self, leader: int) -> broker_pb2_grpc.BrokerStub | None:
        endpoint = self.endpoints.get(leader)
        if endpoint is None:
            return None
        # Each round: a channel left failing while that broker was down (its reconnect backoff
        # grows to a second) is replaced; our own backoff after a failed round paces the attempts.
        # After a restart the leader was back, and followers failed fast against the old channel
        # for 0.2–0.7 s, with every acks=all produce of its partitions waiting.
        self._channels.forget_failed(endpoint)
        return broker_pb2_grpc.BrokerStub(self._channels.channel(endpoint))

    async def _run(self, leader: int) -> None:
        while True:
            partitions = self._by_leader.get(leader)
            if not partitions:
                self._fetchers.pop(leader, None)
                self._by_leader.pop(leader, None)
                self._untruncated.pop(leader, None)
                self._cutting.pop(leader, None)
                self._sessions.pop(leader, None)
                self._wakeups.pop(leader, None)
                return
            stub = self._stub(leader)
            try:
                if stub is None:
                    raise ConnectionError(f"no endpoint known for leader {leader}")
                now = self.clock()
                cutting = self._cutting.get(leader, ())
                due = [
                    partitions[key]
                    for key in self._untruncated.get(leader, ())
                    if key in partitions and key not in cutting and self._query_after.get(key, 0.0) <= now
                ]
                if due:
                    await self._truncate(stub, leader, due)
                await self._fetch(stub, leader, partitions)
            except (grpc.aio.AioRpcError, ConnectionError, TidelogError) as error:
                log.info("replica_fetch_failed", leader=leader, error=str(error)[:200])
                self._sessions.pop(leader, None)  # the leader may have lost it: start a new one
                await asyncio.sleep(self.backoff_s)
            except Exception:  # a bug must not end replication from this leader for good: say it, go on
                log.exception("replica_fetcher_error", leader=leader)
                self._sessions.pop(leader, None)
                await asyncio.sleep(self.backoff_s)

    async def _truncate(
        self, stub: broker_pb2_grpc.BrokerStub, leader: int, partitions: list[FollowedPartition]
    ) -> asyncio.Task[None] | None:
        """Ask `leader` where each partition's epoch ended; mark those that keep everything ready
        to fetch; cut the others in a task of their own, returned (None when no log needs a cut)."""
        if not partitions:
            return None
        request = broker_pb2.OffsetsForLeaderEpochRequest(replica_id=self.broker_id)
        for followed in partitions:
            request.partitions.add(
                topic=followed.topic,
                partition=followed.partition,
                current_leader_epoch=followed.leader_epoch,
                leader_epoch=followed.log.leader_epochs.latest_epoch,
            )
        response = await stub.OffsetsForLeaderEpoch(request, timeout=10)
        by_key = {(followed.topic, followed.partition): followed for followed in partitions}
        refused: collections.Counter[str] = collections.Counter()
        refused_sample: list[str] = []
        answered: list[EpochAnswer] = []
        for answer in response.partitions:
            asked = by_key.get((answer.topic, answer.partition))
            if asked is None or self.followed.get((answer.topic, answer.partition)) is not asked:
                continue
            if answer.error_code:
                # Asked again after a delay that doubles up to the backoff, not at every round: a
                # leader that moved on refuses thousands at once until the new LeaderAndIsr comes
                # (one log line for all).
                self._query_later((answer.topic, answer.partition))
                refused[ErrorCode(answer.error_code).name] += 1
                if len(refused_sample) < 5:
                    refused_sample.append(f"{answer.topic}-{answer.partition}")
                continue
            self._query_after.pop((answer.topic, answer.partition), None)
            self._query_delay.pop((answer.topic, answer.partition), None)
            answered.append((asked, answer.leader_epoch, answer.end_offset))
        if refused:
            log.info("epoch_query_refused", leader=leader, errors=dict(refused), sample=refused_sample)

        # Which logs hold records past their cut: read side by side on the I/O threads, a chunk a
        # task. Those that keep everything are fetched at once; the cuts go on meanwhile (_cut). A
        # broker back from a restart follows thousands of partitions; the leadership its crash
        # moved cut a third of them (records acks=1 never replicated), and the rest waited seconds
        # for those cuts before their first fetch, and so for the ISR.
        judged = await self.io.each_chunk(needs_cut, answered, parallel=BULK_CHUNKS_AT_ONCE)
        flags = [flag for chunk in judged for flag in chunk]
        self._mark_truncated(leader, [asked for (asked, _, _), flag in zip(answered, flags, strict=True) if not flag])
        to_cut = [answer for answer, flag in zip(answered, flags, strict=True) if flag]
        if not to_cut:
            return None
        self._cutting.setdefault(leader, set()).update((asked.topic, asked.partition) for asked, _, _ in to_cut)
        task = asyncio.create_task(self._cut(leader, to_cut), name=f"follower-cuts-{leader}")
        self._cuts.add(task)
        task.add_done_callback(self._cuts.discard)
        return task

    async def _cut(self, leader: int, to_cut: list[EpochAnswer]) -> None:
        """Cut these logs side by side on the I/O threads and sync them once (`sync_cuts`), then let
        the fetcher take them (one interrupted long poll for all). A failed cut is asked again."""

        def cut_chunk(chunk: list[EpochAnswer]) -> None:
            for followed, leader_epoch, end_offset in chunk:
                # Still followed from that leader, looked at just before (no wider window than
                # one task per partition had): a leadership taken meanwhile is not truncated.
                if self.followed.get((followed.topic, followed.partition)) is followed:
                    cut(followed, leader_epoch, end_offset, sync=False)

        keys = {(asked.topic, asked.partition) for asked, _, _ in to_cut}
        try:
            await self.io.each_chunk(cut_chunk, to_cut, parallel=BULK_CHUNKS_AT_ONCE)
            await self.io.run(sync_cuts, to_cut)
        except Exception:
            log.exception("follower_truncation_failed", leader=leader, partitions=len(to_cut))
            for key in keys:  # asked again after a delay that doubles, not at once (a failing disk)
                self._query_later(key)
            return
        finally:
            self._cutting.get(leader, set()).difference_update(keys)
        self._mark_truncated(leader, [asked for asked, _, _ in to_cut])
        self._wakeups.setdefault(leader, asyncio.Event()).set()
        self._interrupt(leader)

    def _mark_truncated(self, leader: int, partitions: list[FollowedPartition]) -> None:
        for asked in partitions:
            key = (asked.topic, asked.partition)
            if self.followed.get(key) is not asked:
                continue  # followed anew meanwhile: that one truncates again
            asked.truncated = True
            self._untruncated.get(leader, set()).discard(key)
            self._changed(leader, key)

    def _query_later(self, key: tuple[str, int]) -> None:
        """The partition's epoch is asked again after a delay that doubles, from
        EPOCH_QUERY_RETRY_FIRST_S up to replica.fetch.backoff.ms."""
        previous = self._query_delay.get(key)
        delay = EPOCH_QUERY_RETRY_FIRST_S if previous is None else previous * 2
        delay = self._query_delay[key] = min(delay, max(self.backoff_s, EPOCH_QUERY_RETRY_FIRST_S))
        self._query_after[key] = self.clock() + delay

    def _leadership_moved(self, followed: FollowedPartition) -> None:
        """The leader no longer leads this partition at our epoch (it heard of a change before we
        did; our LeaderAndIsr is on its way). Only this partition waits: out of the session, its
        epoch asked again after the first short delay, while the leader's other partitions are
        fetched on. (The whole fetcher used to back off, and every acks=all produce of those other
        partitions waited replica.fetch.backoff.ms: a preferred election's 0.2 s gap.)"""
        key = (followed.topic, followed.partition)
        followed.truncated = False
        self._untruncated.setdefault(followed.leader, set()).add(key)
        self._query_later(key)
        self._changed(followed.leader, key)

    async def _fetch(
        self, stub: broker_pb2_grpc.BrokerStub, leader: int, partitions: dict[tuple[str, int], FollowedPartition]
    ) -> None:
        session = self._sessions.setdefault(leader, FollowerSession())
        full = session.session_id == 0
        # A full fetch lists every partition ready to fetch; an incremental one only those whose position changed.
        looked_at = list(partitions) if full else list(session.changed)
        session.changed.clear()
        changes: dict[tuple[str, int], tuple[int, int, int]] = {}
        forgotten: list[tuple[str, int]] = []
        # The long poll ends by the time a refused epoch query is due again: that partition is
        # fetched only after its query, so not after a whole replica.fetch.wait.max.ms.
        query_in_s = self._next_query_in_s(leader)
        wait_max_ms = self.settings.replica_fetch_wait_max_ms
        request = broker_pb2.FetchRequest(
            replica_id=self.broker_id,
            replica_incarnation=self.incarnation,
            max_wait_ms=wait_max_ms if query_in_s is None else min(wait_max_ms, int(query_in_s * 1000) + 1),
            min_bytes=1,
            max_bytes=self.settings.replica_fetch_response_max_bytes,
            incremental=True,
            session_id=session.session_id,
            session_epoch=session.epoch,
        )
        for key in looked_at:
            followed = partitions.get(key)
            if followed is None or not followed.truncated:  # not ours now, or not ready: out of the session
                if key in session.sent and not full:
                    forgotten.append(key)
                continue
            position = (followed.log.log_end_offset, followed.leader_epoch, followed.log.log_start_offset)
            if full or session.sent.get(key) != position:
                changes[key] = position
                request.partitions.add(
                    topic=followed.topic,
                    partition=followed.partition,
                    fetch_offset=position[0],
                    partition_max_bytes=self.settings.replica_fetch_max_bytes,
                    current_leader_epoch=followed.leader_epoch,
                    log_start_offset=position[2],
                )
        if not changes and not forgotten and (full or not session.sent):
            # Nothing ready to fetch (every partition waits for its epoch query): a fetch would
            # only long-poll the leader for nothing, replica.fetch.wait.max.ms with the queries
            # due meanwhile. Wait for the first of them to be due, or for a partition to change.
            await self._idle_wait(leader)
            return
        for topic, partition in forgotten:
            request.forgotten.add(topic=topic, partition=partition)
        try:
            response = await self._poll(stub, leader, request)
        except BaseException:
            session.changed.update(looked_at)  # not taken: look at them again
            raise
        if response is None:
            # Interrupted by follow(). Whether the leader took the request (and moved our
            # session's epoch) is unknown: the next fetch opens a new session.
            self._sessions.pop(leader, None)
            return
        if response.error_code:  # the session is unknown or out of step there: open a new one
            log.info("fetch_session_reset", leader=leader, error=ErrorCode(response.error_code).name)
            self._sessions.pop(leader, None)
            return
        if full:
            session.sent.clear()
            session.epoch = 1
        else:
            session.epoch += 1
        session.session_id = response.session_id
        session.sent.update(changes)
        for key in forgotten:
            session.sent.pop(key, None)
        await self._apply_all(leader, session, partitions, response)

    async def _apply_all(
        self,
        leader: int,
        session: FollowerSession,
        partitions: dict[tuple[str, int], FollowedPartition],
        response: broker_pb2.FetchResponse,
    ) -> None:
        moved: collections.Counter[str] = collections.Counter()
        appends: list[tuple[FollowedPartition, Any]] = []
        pacer = LoopSlices()  # a session's first answer holds thousands of partitions
        for result in response.partitions:  # only the partitions with news
            await pacer.pace()
            key = (result.topic, result.partition)
            fetched = partitions.get(key)
            if fetched is None or self.followed.get(key) is not fetched:
                continue  # leadership changed while the fetch was in flight
            if result.error_code in LEADERSHIP_ERRORS:
                self._leadership_moved(fetched)
                moved[ErrorCode(result.error_code).name] += 1
                continue
            if result.record_batches and not result.error_code:
                appends.append((fetched, result))
                continue
            await self._apply(fetched, result)
            session.changed.add(key)  # its log end may have moved
        if moved:
            log.info("fetch_refused_leadership_moved", leader=leader, errors=dict(moved))
        if pacer.yields:
            # Still followed from this leader now, after the yields (the check above was then): no
            # loop turn between this look and the appends' dispatch, as when the loop never yields.
            appends = [
                (fetched, result)
                for fetched, result in appends
                if self.followed.get((fetched.topic, fetched.partition)) is fetched
            ]
        if appends:
            await self._append_all(session, appends)

    async def _append_all(self, session: FollowerSession, appends: list[tuple[FollowedPartition, Any]]) -> None:
        """Append what one fetch brought (follower_io.append_fetched). A failed append stops its
        task's later ones and is raised once the others' high watermarks are applied."""
        started = time.perf_counter()
        outcomes = await append_fetched(self.io, appends)
        APPEND_MS.observe((time.perf_counter() - started) * 1000)
        failure: BaseException | None = None
        for chunk, (chunk_done, chunk_failure) in outcomes:
            for followed, result in chunk[:chunk_done]:
                followed.log.update_high_watermark(min(result.high_watermark, followed.log.log_end_offset))
                if result.log_start_offset > followed.log.log_start_offset:  # (rare: DeleteRecords)
                    await self._follow_log_start(followed, result.log_start_offset)
                key = (followed.topic, followed.partition)
                self.on_appended(key)
                session.changed.add(key)  # its log end moved
            failure = failure or chunk_failure
        if failure is not None:
            raise failure

    async def _poll(
        self, stub: broker_pb2_grpc.BrokerStub, leader: int, request: broker_pb2.FetchRequest
    ) -> broker_pb2.FetchResponse | None:
        """The leader's answer to `request`; None if follow() interrupted the long poll."""
        polling: asyncio.Future[broker_pb2.FetchResponse] = asyncio.ensure_future(
            stub.Fetch(request, timeout=self.settings.replica_fetch_wait_max_ms / 1000 + 30)
        )
        self._polling[leader] = polling
        try:
            return await polling
        except asyncio.CancelledError:
            this = asyncio.current_task()
            if leader not in self._interrupted or not polling.cancelled() or (this is not None and this.cancelling()):
                raise  # the fetcher itself is stopping
            return None
        finally:
            self._polling.pop(leader, None)
            self._interrupted.discard(leader)

    def _next_query_in_s(self, leader: int) -> float | None:
        """Seconds until the first epoch query to `leader` is due (0 for one due now); None for none
        (a partition being cut is asked nothing: _cut ends the long poll when it is done)."""
        cutting = self._cutting.get(leader, ())
        untruncated = [key for key in self._untruncated.get(leader, ()) if key not in cutting]
        if not untruncated:
            return None
        now = self.clock()
        return max(0.0, min(self._query_after.get(key, now) for key in untruncated) - now)

    async def _idle_wait(self, leader: int) -> None:
        wakeup = self._wakeups.setdefault(leader, asyncio.Event())
        query_in_s = self._next_query_in_s(leader)
        timeout = self.backoff_s if query_in_s is None else min(query_in_s, self.backoff_s)
        if timeout > 0 and not wakeup.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wakeup.wait(), timeout)
        wakeup.clear()

    async def _apply(self, followed: FollowedPartition, result: Any) -> None:
        if result.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
            # Behind the leader's log start (or ahead after an unclean election): start over there.
            log.warning(
                "follower_out_of_range",
                topic=followed.topic,
                partition=followed.partition,
                leader_log_start=result.log_start_offset,
            )
            await self.io.run(followed.log.truncate_fully_and_start_at, max(result.log_start_offset, 0))
            self._changed(followed.leader, (followed.topic, followed.partition))
            return
        if result.error_code:
            raise TidelogError(f"{followed.topic}-{followed.partition}: {ErrorCode(result.error_code).name}")
        assert not result.record_batches, "appends go together (_append_all)"
        followed.log.update_high_watermark(min(result.high_watermark, followed.log.log_end_offset))
        await self._follow_log_start(followed, result.log_start_offset)
        self.on_appended((followed.topic, followed.partition))

    async def _follow_log_start(self, followed: FollowedPartition, leader_log_start: int) -> None:
        """The leader moved its log start (DeleteRecords): move ours as far, within our high watermark
        (Kafka's maybeIncrementLogStartOffset); retention, each replica applies itself."""
        if (wanted := min(leader_log_start, followed.log.high_watermark)) > followed.log.log_start_offset:
            await self.io.run(followed.log.delete_records, wanted)

    async def close(self) -> None:
        for task in [*self._fetchers.values(), *self._cuts]:
            task.cancel()
        for task in [*self._fetchers.values(), *self._cuts]:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._fetchers.clear()
        await self._channels.close()
