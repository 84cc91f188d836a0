"""A follower's truncation by leader epoch (KIP-101/279), beside its fetches: each partition newly
followed from a leader is asked about first (OffsetsForLeaderEpoch: where did my latest epoch end
on your side?) and cut where the logs split; only then is it fetched. One task per leader asks
about all the partitions due at once; the fetcher fetches the ready ones meanwhile and hears of
each batch made ready (`on_ready`). A refusal (the leader has yet to hear it leads) is asked again
after a delay that doubles, from EPOCH_QUERY_RETRY_FIRST_S up to replica.fetch.backoff.ms.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import Callable
from typing import Final

import grpc
import structlog

from tidelog.broker.follower_io import EpochAnswer, FollowedPartition, cut, needs_cut, sync_cuts
from tidelog.broker.storage_io import BULK_CHUNKS_AT_ONCE, StorageIo
from tidelog.common.clock import Monotonic
from tidelog.common.errors import ErrorCode, TidelogError
from tidelog.v1 import broker_pb2, broker_pb2_grpc

__all__ = ["EPOCH_QUERY_RETRY_FIRST_S", "FollowerTruncation"]

log = structlog.get_logger(__name__)

Key = tuple[str, int]

# A refused epoch query is asked again this soon, then twice as late each time up to
# replica.fetch.backoff.ms. The usual refusal is a race: the controller tells leader and followers
# at once, and a follower's query can reach the new leader before its own LeaderAndIsr does; it
# then leads milliseconds later, and a follower that waited the whole backoff stalled every acks=all
# produce of the partition as long (a controlled shutdown's gap).
EPOCH_QUERY_RETRY_FIRST_S: Final = 0.005


class FollowerTruncation:
    """The partitions of each leader still to truncate, their epoch queries and their cuts.
    `followed` and `by_leader` are the fetcher manager's own (what is followed now, from whom);
    `stub` names the leader's endpoint; `on_ready(leader, partitions)` is told of partitions ready
    to fetch."""

    def __init__(
        self,
        broker_id: int,
        io: StorageIo,
        followed: dict[Key, FollowedPartition],
        by_leader: dict[int, dict[Key, FollowedPartition]],
        *,
        backoff_s: float,
        clock: Monotonic,
        stub: Callable[[int], broker_pb2_grpc.BrokerStub | None],
        on_ready: Callable[[int, list[FollowedPartition]], None],
    ) -> None:
        self.broker_id = broker_id
        self.io = io
        self.followed = followed
        self.by_leader = by_leader
        self.backoff_s = backoff_s
        self.clock = clock
        self.stub = stub
        self.on_ready = on_ready
        self._untruncated: dict[int, set[Key]] = {}  # by leader: KIP-279 truncation to do
        self._cutting: dict[int, set[Key]] = {}  # by leader: ... under way (_cut)
        self._cuts: set[asyncio.Task[None]] = set()
        self._query_after: dict[Key, float] = {}  # refused epoch queries: not before then
        self._query_delay: dict[Key, float] = {}  # ... and the delay that set it
        self._queriers: dict[int, asyncio.Task[None]] = {}  # by leader: its epoch queries (_query_loop)
        self._query_wakeups: dict[int, asyncio.Event] = {}  # by leader: a partition to ask about

    def start(self, followed: FollowedPartition) -> None:
        """A partition newly followed: asked about at once, beside the fetches of the others."""
        self._untruncated.setdefault(followed.leader, set()).add((followed.topic, followed.partition))
        self._ensure_querier(followed.leader)

    def again(self, followed: FollowedPartition) -> None:
        """The leader no longer leads this partition at our epoch (it heard of a change before we
        did): asked again after the first short delay."""
        key = (followed.topic, followed.partition)
        followed.truncated = False
        self._untruncated.setdefault(followed.leader, set()).add(key)
        self._query_later(key)
        self._ensure_querier(followed.leader)

    def forget(self, leader: int, key: Key) -> None:
        self._untruncated.get(leader, set()).discard(key)
        self._query_after.pop(key, None)
        self._query_delay.pop(key, None)

    def forget_leader(self, leader: int) -> None:
        """Nothing is followed from `leader` any more."""
        self._untruncated.pop(leader, None)
        self._cutting.pop(leader, None)

    def _ensure_querier(self, leader: int) -> None:
        task = self._queriers.get(leader)
        if task is None or task.done():
            self._queriers[leader] = asyncio.create_task(self._query_loop(leader), name=f"epoch-queries-{leader}")
        else:
            self._query_wakeups.setdefault(leader, asyncio.Event()).set()

    async def _query_loop(self, leader: int) -> None:
        """Ask `leader` about the epochs of the partitions newly followed from it, all that are due
        in one request, until none is left; the fetcher meanwhile fetches the others. (Asked by the
        fetcher itself, between two fetches, every partition of that leader waited for each
        answer: a broker taking on a thousand followed partitions in a controlled shutdown kept an
        acks=all produce of a partition it already fetched waiting 0.3 s for the query, then 0.5 s
        for the full fetch that followed the reset session.)"""
        wakeup = self._query_wakeups.setdefault(leader, asyncio.Event())
        while True:
            wakeup.clear()
            partitions = self.by_leader.get(leader, {})
            waiting = self._to_ask(leader)
            if not waiting:  # (a cut that fails, a leadership moved: another is started)
                self._queriers.pop(leader, None)
                return
            now = self.clock()
            due = [partitions[key] for key in waiting if self._query_after.get(key, 0.0) <= now]
            if not due:
                first = min(self._query_after[key] for key in waiting)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wakeup.wait(), max(first - now, 0.0))
                continue
            try:
                stub = self.stub(leader)
                if stub is None:
                    raise ConnectionError(f"no endpoint known for leader {leader}")
                await self._truncate(stub, leader, due)
            except (grpc.aio.AioRpcError, ConnectionError, TidelogError) as error:
                log.info("epoch_query_failed", leader=leader, partitions=len(due), error=str(error)[:200])
                self._query_each_later(due)
            except Exception:  # a bug must not end these partitions' replication for good: say it, go on
                log.exception("epoch_query_error", leader=leader)
                self._query_each_later(due)

    def _to_ask(self, leader: int) -> list[tuple[str, int]]:
        """The partitions followed from `leader` whose epoch is still to ask (a cut under way asks nothing)."""
        partitions = self.by_leader.get(leader, {})
        cutting = self._cutting.get(leader, ())
        return [key for key in self._untruncated.get(leader, ()) if key in partitions and key not in cutting]

    def _query_each_later(self, partitions: list[FollowedPartition]) -> None:
        for followed in partitions:
            key = (followed.topic, followed.partition)
            if self.followed.get(key) is followed and not followed.truncated:
                self._query_later(key)

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
            self._ensure_querier(leader)
            return
        finally:
            self._cutting.get(leader, set()).difference_update(keys)
        self._mark_truncated(leader, [asked for asked, _, _ in to_cut])

    def _mark_truncated(self, leader: int, partitions: list[FollowedPartition]) -> None:
        """These partitions are ready to fetch: the fetcher lists them in its next fetch, at once."""
        ready = []
        for asked in partitions:
            key = (asked.topic, asked.partition)
            if self.followed.get(key) is not asked:
                continue  # followed anew meanwhile: that one truncates again
            asked.truncated = True
            self._untruncated.get(leader, set()).discard(key)
            ready.append(asked)
        if ready:
            self.on_ready(leader, ready)

    def _query_later(self, key: tuple[str, int]) -> None:
        """The partition's epoch is asked again after a delay that doubles, from
        EPOCH_QUERY_RETRY_FIRST_S up to replica.fetch.backoff.ms."""
        previous = self._query_delay.get(key)
        delay = EPOCH_QUERY_RETRY_FIRST_S if previous is None else previous * 2
        delay = self._query_delay[key] = min(delay, max(self.backoff_s, EPOCH_QUERY_RETRY_FIRST_S))
        self._query_after[key] = self.clock() + delay

    async def close(self) -> None:
        tasks = [*self._queriers.values(), *self._cuts]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._queriers.clear()
