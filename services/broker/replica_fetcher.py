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

from tidelog.broker.follower_io import FollowedPartition, append_fetched
from tidelog.broker.follower_session import FollowerSession
from tidelog.broker.follower_truncation import FollowerTruncation
from tidelog.broker.storage_io import StorageIo
from tidelog.common.channels import ChannelPool
from tidelog.common.clock import Monotonic, monotonic
from tidelog.common.errors import ErrorCode, TidelogError
from tidelog.common.settings import BrokerSettings
from tidelog.server_common import metrics_catalog
from tidelog.server_common.loop_slices import LoopSlices
from tidelog.v1 import broker_pb2, broker_pb2_grpc

__all__ = ["FollowedPartition", "ReplicaFetcherManager"]

log = structlog.get_logger(__name__)

# Partitions one fetch adds to its session (a new session's full fetch lists as many); the rest go
# in the next fetches, which do not long-poll meanwhile. A leader answers a fetch adding thousands
# (a broker back from a restart, leaderships moved by a controlled shutdown) in 0.5-0.7 s on a
# busy machine, and the partitions the session already held, whose acks=all produces wait for
# this follower, waited as long.
SESSION_ADDS_MAX: Final = 1000
# A fetch in flight is cut short to list a partition newly ready only once it has waited this long
# at the leader (a long poll over idle partitions). One in flight for less is likely being answered
# (a busy leader answers every few milliseconds): cut, its answer would be thrown away and sent
# again; it ends soon by itself.
INTERRUPT_AFTER_S: Final = 0.05
# A partition's position as the leader holds it, when a fetch cut short may or may not have moved
# it: never equal to a real one, so the partition is listed again once ready (or dropped again).
UNKNOWN_POSITION: Final = (-1, -1, -1)
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
        self._wakeups: dict[int, asyncio.Event] = {}  # by leader: its partitions changed
        # By leader: the fetch in flight, and when it left (loop time).
        self._polling: dict[int, tuple[asyncio.Future[broker_pb2.FetchResponse], float]] = {}
        self._interrupted: set[int] = set()  # leaders whose fetch in flight _interrupt cancelled
        self._fetchers: dict[int, asyncio.Task[None]] = {}
        self._sessions: dict[int, FollowerSession] = {}  # by leader
        self._channels = channels or ChannelPool()
        self.on_appended: Callable[[tuple[str, int]], None] = lambda key: None
        self.truncation = FollowerTruncation(
            broker_id,
            io,
            self.followed,
            self._by_leader,
            backoff_s=self.backoff_s,
            clock=clock,
            stub=lambda leader: self._stub(leader),  # noqa: PLW0108 (looked up at each use: tests stand in for it)
            on_ready=self._ready,
        )

    def follow(self, followed: FollowedPartition) -> None:
        key = (followed.topic, followed.partition)
        current = self.followed.get(key)
        if current is not None and (current.leader, current.leader_epoch) == (followed.leader, followed.leader_epoch):
            return
        if current is not None:
            self.unfollow(key)
        self.followed[key] = followed
        self._by_leader.setdefault(followed.leader, {})[key] = followed
        self._changed(followed.leader, key)
        # Its epoch is asked first, beside the fetches of the partitions already fetched: the long
        # poll in flight goes on until the answer makes the partition ready (`_ready`).
        self.truncation.start(followed)
        self._ensure_fetcher(followed.leader)

    def _ready(self, leader: int, partitions: list[FollowedPartition]) -> None:
        """Truncated: the next fetch lists them, at once."""
        for followed in partitions:
            self._changed(leader, (followed.topic, followed.partition))
        self._wakeups.setdefault(leader, asyncio.Event()).set()
        self._interrupt(leader)

    def _interrupt(self, leader: int) -> None:
        """End the long poll in flight to `leader`, if one is: a partition newly ready to fetch
        from it is fetched only by the next request, and a long poll over idle partitions holds
        that back for up to replica.fetch.wait.max.ms, with every acks=all produce of the
        partition waiting as long (a controlled shutdown moving leaderships to brokers we already
        fetch from). The session survives: the leader takes back a fetch its sender cancelled
        (`FetchSession.taken_back`), so the next request is incremental at the same epoch."""
        in_flight = self._polling.get(leader)
        if in_flight is None or in_flight[0].done():
            return
        polling, started = in_flight
        loop = asyncio.get_running_loop()
        waited = loop.time() - started
        if waited < INTERRUPT_AFTER_S:  # maybe answering now: looked at again once it has waited
            loop.call_later(INTERRUPT_AFTER_S - waited, self._interrupt_if_polling, leader, polling)
            return
        self._interrupted.add(leader)
        polling.cancel()

    def _interrupt_if_polling(self, leader: int, polling: asyncio.Future[broker_pb2.FetchResponse]) -> None:
        in_flight = self._polling.get(leader)
        if in_flight is not None and in_flight[0] is polling:
            self._interrupt(leader)

    def unfollow(self, key: tuple[str, int]) -> None:
        followed = self.followed.pop(key, None)
        if followed is None:
            return
        self._by_leader.get(followed.leader, {}).pop(key, None)
        self.truncation.forget(followed.leader, key)
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
                self.truncation.forget_leader(leader)
                self._sessions.pop(leader, None)
                self._wakeups.pop(leader, None)
                return
            stub = self._stub(leader)
            try:
                if stub is None:
                    raise ConnectionError(f"no endpoint known for leader {leader}")
                await self._fetch(stub, leader, partitions)
            except (grpc.aio.AioRpcError, ConnectionError, TidelogError) as error:
                log.info("replica_fetch_failed", leader=leader, error=str(error)[:200])
                self._sessions.pop(leader, None)  # the leader may have lost it: start a new one
                await asyncio.sleep(self.backoff_s)
            except Exception:  # a bug must not end replication from this leader for good: say it, go on
                log.exception("replica_fetcher_error", leader=leader)
                self._sessions.pop(leader, None)
                await asyncio.sleep(self.backoff_s)

    def _leadership_moved(self, followed: FollowedPartition) -> None:
        """The leader no longer leads this partition at our epoch (it heard of a change before we
        did; our LeaderAndIsr is on its way). Only this partition waits: out of the session, its
        epoch asked again after the first short delay, while the leader's other partitions are
        fetched on. (The whole fetcher used to back off, and every acks=all produce of those other
        partitions waited replica.fetch.backoff.ms: a preferred election's 0.2 s gap.)"""
        self.truncation.again(followed)
        self._changed(followed.leader, (followed.topic, followed.partition))

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
        deferred: list[tuple[str, int]] = []  # to add in the next fetch (SESSION_ADDS_MAX)
        added = 0
        request = broker_pb2.FetchRequest(
            replica_id=self.broker_id,
            replica_incarnation=self.incarnation,
            max_wait_ms=self.settings.replica_fetch_wait_max_ms,
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
                adding = full or key not in session.sent
                if adding and added >= SESSION_ADDS_MAX:
                    deferred.append(key)
                    continue
                added += adding
                changes[key] = position
                request.partitions.add(
                    topic=followed.topic,
                    partition=followed.partition,
                    fetch_offset=position[0],
                    partition_max_bytes=self.settings.replica_fetch_max_bytes,
                    current_leader_epoch=followed.leader_epoch,
                    log_start_offset=position[2],
                )
        if deferred:
            session.changed.update(deferred)
            request.max_wait_ms = 0  # no long poll while partitions wait to be added
        if not changes and not forgotten and (full or not session.sent):
            # Nothing ready to fetch (every partition waits for its epoch query): a fetch would
            # only long-poll the leader for nothing. Wait for an answer to make one ready.
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
            # Interrupted (_interrupt): the next request goes at the same epoch with these
            # partitions again. The leader took this one back, or, had it answered just as we
            # cancelled, takes the next one in its place and answers it with the same news
            # (FetchSession.taken_back, answer_lost). Whether it applied what this one listed is
            # unknown: each partition it added, moved or dropped is listed (or dropped) again,
            # whatever its position then. (A partition dropped here and ready again at the same
            # position was not listed: the leader no longer held it, and its acks=all
            # produces waited for the ISR to drop this follower, 30 s.)
            for key in (*changes, *forgotten):
                session.sent[key] = UNKNOWN_POSITION
            session.changed.update(looked_at)
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
        self._polling[leader] = (polling, asyncio.get_running_loop().time())
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

    async def _idle_wait(self, leader: int) -> None:
        wakeup = self._wakeups.setdefault(leader, asyncio.Event())
        if not wakeup.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wakeup.wait(), self.backoff_s)
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
        await self.truncation.close()
        for task in self._fetchers.values():
            task.cancel()
        for task in self._fetchers.values():
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._fetchers.clear()
        await self._channels.close()
