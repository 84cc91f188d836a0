"""The leader's side of replication: what each follower's fetch says (its position, its life, its
fetch session), the high watermark that follows from it, and which partitions the ISR check
(isr_manager.py) must look at.

`isr_watch` holds the partitions whose ISR could change. A partition leaves it once settled (each
ISR member at our log end through a live session, no other replica fetching it) and comes back on
whatever could unsettle it: an append, a state change, a follower's new life, a fetch by a replica
outside the ISR, its session going quiet or closing. Idle, the ISR check costs nothing per
partition, also while a broker is down.

A partition written on, every replica in its ISR and none behind for long, is *deferred*: out of
the watch until the earliest time a member could have lagged for replica.lag.time.max.ms, its
appends meanwhile not putting it back. Under a produce to every one of 10,000 partitions the check
judged them all again every 0.5 s, a quarter of a leader's event-loop time (py-spy).

A replica outside the ISR whose fetch reaches the high watermark is *caught up*: its partition goes
to `caught_up` and `caught_up_news` is set, so the ISR check judges those partitions at once rather
than at its next round (Kafka expands the ISR in the very fetch that catches up).
"""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import Callable, Mapping

import structlog

from tidelog.broker.fetch_session import FetchSession, FetchSessionCache
from tidelog.broker.partition import Partition, PartitionKey
from tidelog.broker.replica_role import ReplicaRole
from tidelog.common.clock import Monotonic
from tidelog.common.errors import ErrorCode
from tidelog.v1 import broker_pb2

__all__ = ["FollowerTracking"]

log = structlog.get_logger(__name__)


class FollowerTracking:
    def __init__(
        self,
        broker_id: int,
        partitions: Mapping[PartitionKey, Partition],
        sessions: FetchSessionCache,
        clock: Monotonic,
    ) -> None:
        self.broker_id = broker_id
        self.partitions = partitions  # the replica manager's map
        self.sessions = sessions
        self.clock = clock
        self.isr_watch: set[PartitionKey] = set()
        self._deferred: dict[PartitionKey, float] = {}  # out of the watch until then (monotonic s)
        self._deferred_due: list[tuple[float, PartitionKey]] = []  # a heap; stale entries skipped
        # Partitions where a replica outside the ISR reached the HW since the ISR check last took them.
        self.caught_up: set[PartitionKey] = set()
        self.caught_up_news = asyncio.Event()
        # Whether a replica, fetching as a life (when known), may be asked into an ISR: the ISR
        # manager's metadata says (KIP-841). One that may not leaves the partition settled: a broker
        # killed had fetched within the last quiet time, and for those 15 s (half the default
        # replica.lag.time.max.ms) every partition it was missing from was judged again at every
        # check, 0.1-0.3 s of a leader's loop each 0.5 s at 10,000 partitions. The ISR manager
        # watches them all again when that answer may have changed (`IsrManager.check_once`).
        self.may_join: Callable[[int, str | None], bool] = lambda replica, incarnation: True
        sessions.on_close = self.session_closed

    def appended(self, key: PartitionKey) -> None:
        """A leader append: its followers are behind until they fetch it, watched unless deferred."""
        if key not in self._deferred:
            self.isr_watch.add(key)

    def defer(self, key: PartitionKey, due: float) -> None:
        """Out of the ISR watch until `due`: no ISR change is possible before (the caller knows).
        Anything else that puts it back in the watch meanwhile has it judged (and deferred) again."""
        self.isr_watch.discard(key)
        known = self._deferred.get(key)
        if known is None or due < known:
            heapq.heappush(self._deferred_due, (due, key))
        self._deferred[key] = due

    def watch_due(self, now: float) -> None:
        """Put back in the ISR watch the deferred partitions whose time has come."""
        heap = self._deferred_due
        while heap and heap[0][0] <= now:
            entry_due, key = heapq.heappop(heap)
            due = self._deferred.get(key)
            if due is None:
                continue
            if due <= now:
                del self._deferred[key]
                self.isr_watch.add(key)
            elif due > entry_due:
                heapq.heappush(heap, (due, key))  # deferred again, later: this entry stands for it

    def session_closed(self, session: FetchSession) -> None:
        if session.replica_id >= 0:  # a follower's (a consumer's says nothing of the ISR)
            self.isr_watch.update(session.partitions)

    def record_fetch(
        self,
        replica_id: int,
        incarnation: str,
        fetches: list[broker_pb2.FetchPartition],
        session: FetchSession | None = None,
    ) -> dict[PartitionKey, int]:
        """Note each follower's position and advance the HW; error codes (by partition) for the
        fetches it must refuse (an older or newer leader epoch than ours)."""
        errors: dict[PartitionKey, int] = {}
        new_lives: list[PartitionKey] = []
        now = self.clock()
        if session is not None and session.unrecorded:
            listed = {(fetch.topic, fetch.partition) for fetch in fetches}
            held = [session.partitions[key] for key in session.unrecorded - listed if key in session.partitions]
            fetches = [*fetches, *held]
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
                # Not (yet) a replica here: a reassignment's state may reach the follower before
                # this leader. Recorded once it is one, from the session, at a later fetch.
                if session is not None:
                    session.unrecorded.add(key)
                continue
            if session is not None:
                session.unrecorded.discard(key)
            outside = replica_id not in hosted.state.isr
            if hosted.follower_incarnation.get(replica_id) != incarnation:
                self.isr_watch.add(key)  # a new life is judged afresh
            log_start = fetch.log_start_offset if fetch.HasField("log_start_offset") else None
            if hosted.note_follower_fetch(
                replica_id, incarnation, fetch.fetch_offset, now, session, log_start=log_start
            ):
                new_lives.append(key)
            hosted.advance_high_watermark(self.broker_id)
            if outside and fetch.fetch_offset >= hosted.log.high_watermark:
                # It may join: judged now (the caught-up check), and kept in the watch until it
                # joins or stops. Behind the high watermark it cannot; its fetch that reaches it
                # comes here (`settled` leaves such a partition out of the watch until then).
                self.isr_watch.add(key)
                self.caught_up.add(key)
                self.caught_up_news.set()
        if new_lives:
            log.info("follower_new_life", replica=replica_id, partitions=len(new_lives), sample=new_lives[:5])
        return errors

    def watch_quiet_sessions(self, quiet_s: float) -> None:
        """Put back in the ISR watch the partitions of sessions with no fetch for `quiet_s`."""
        horizon = self.clock() - quiet_s
        for session in self.sessions.sessions.values():
            if session.replica_id >= 0 and session.last_fetch_s < horizon and not session.quiet:
                session.quiet = True
                self.isr_watch.update(session.partitions)

    def settled(self, hosted: Partition, now: float, quiet_s: float) -> bool:
        """Nothing about `hosted`'s ISR can change until something puts it back in the watch: every
        ISR member at our log end through a live session, and no replica outside the ISR fetching
        it at the high watermark (one behind it cannot join until a fetch reaches it, which puts
        the partition back: `record_fetch`). While a broker was down, restarting or catching up,
        the thousands of partitions it is missing from were judged again at every check (every
        0.5 s, in one piece: the check cannot yield), 30% of a leader's event-loop time in a
        rolling restart at 10,000 partitions (py-spy)."""
        if hosted.pending_isr is not None:
            return False
        end = hosted.log.log_end_offset
        key = (hosted.topic, hosted.partition)
        isr = hosted.state.isr
        for replica in hosted.state.replicas:
            if replica == self.broker_id:
                continue
            if replica in isr:
                session = hosted.follower_sessions.get(replica)
                if (
                    session is None
                    or not session.holds(key)
                    or session.last_fetch_s < now - quiet_s
                    or hosted.follower_end.get(replica, -1) < end
                ):
                    return False
            elif (
                hosted.fetched_s(replica) >= now - quiet_s
                and hosted.follower_end.get(replica, -1) >= hosted.log.high_watermark
                and self.may_join(replica, hosted.follower_incarnation.get(replica))
            ):
                return False  # fetching at the high watermark: it may join
        return True
