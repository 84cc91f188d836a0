"""A partition replica as one broker hosts it (Kafka's Partition): its log and leadership, and as
leader the followers' positions, from which it keeps HW = the smallest log end offset over the
maximal ISR (KIP-497: the committed ISR and a change in flight).

The replica manager owns the map of them; what changes them is split by job: the controller's
requests (partition_states.py), the followers' fetches (follower_tracking.py), the data path
(replica_manager.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import time
from collections.abc import Collection

from tidelog.broker.fetch_session import FetchSession
from tidelog.broker.replica_role import ReplicaRole, transition
from tidelog.broker.storage import PartitionLog
from tidelog.v1 import common_pb2

__all__ = ["Partition", "PartitionKey", "PartitionRead"]

PartitionKey = tuple[str, int]  # (topic, partition)


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
    last_stable_offset: int = -1
    aborted: tuple[tuple[int, int], ...] = ()  # read_committed: (producer id, first offset) of each abort read


@dataclasses.dataclass(slots=True)
class Partition:
    """One hosted replica: its log, the state the controller last sent, and, as leader, what each
    follower's fetches said (its log end, when it last fetched and was caught up, its life)."""

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
    # Each follower's log start as its fetches said (the low watermark: DeleteRecords waits on it),
    # and the event set when one moves, made only while a DeleteRecords waits (an Event is ~0.6 KB).
    follower_log_start: dict[int, int] = dataclasses.field(default_factory=dict)
    log_start_moved: asyncio.Event | None = None
    # Which life of each follower the three maps above describe (KIP-903): a fetch from a new life
    # resets them, so a restarted replica is judged only on what it holds now.
    follower_incarnation: dict[int, str] = dataclasses.field(default_factory=dict)
    leader_since_s: float = -math.inf  # when this leadership began (the broker's monotonic clock)
    # When records or a high watermark last came (time.monotonic(): an order of state changes
    # only, `PartitionStates` applies the partitions written to lately first).
    appended_s: float = -math.inf
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
        if self.pending_isr is not None and self.pending_isr[0] != state.partition_epoch:
            # The change asked for at an older partition epoch is decided (committed or not, the
            # state in force says which): nothing is in flight. Kept, it held the partition in the
            # ISR check's watch for good, judged every 0.5 s: a push that came before the
            # AlterPartition answer left 3,333 such partitions per leader after a restart at
            # 10,000 partitions, 0.1-0.3 s of the event loop at every check.
            self.pending_isr = None
        self.state = state

    def delete(self) -> None:
        assert self.role is not ReplicaRole.DELETED, "a replica is deleted once"
        self.role = ReplicaRole.DELETED

    def forget_followers(self, now: float) -> None:
        """A new leader epoch: what followers fetched in an older one proves nothing now."""
        self.follower_end.clear()
        self.follower_caught_up_s.clear()
        self.follower_fetched_s.clear()
        self.follower_log_start.clear()
        self.follower_incarnation.clear()
        self.follower_sessions.clear()
        self.leader_since_s = now

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
        self,
        replica_id: int,
        incarnation: str,
        fetch_offset: int,
        now: float,
        session: FetchSession | None = None,
        *,
        log_start: int | None = None,
    ) -> bool:
        """Leader: a follower fetched from `fetch_offset`, so it holds everything below it, and
        nothing below `log_start` (None: it did not say). True when this fetch came from a new life
        of a follower known before (the caller logs them, one line a request: a restarted broker's
        first fetch names thousands)."""
        new_life = False
        if self.follower_incarnation.get(replica_id) != incarnation:
            new_life = replica_id in self.follower_incarnation
            self.follower_end.pop(replica_id, None)
            self.follower_caught_up_s.pop(replica_id, None)
            self.follower_fetched_s.pop(replica_id, None)
            self.follower_log_start.pop(replica_id, None)
            self.follower_incarnation[replica_id] = incarnation
        if log_start is not None and self.follower_log_start.get(replica_id) != log_start:
            self.follower_log_start[replica_id] = log_start
            if self.log_start_moved is not None:
                self.log_start_moved.set()
                self.log_start_moved = None
        self.follower_end[replica_id] = fetch_offset
        self.follower_fetched_s[replica_id] = now
        if session is None:
            self.follower_sessions.pop(replica_id, None)
        else:
            self.follower_sessions[replica_id] = session
        if fetch_offset >= self.log.log_end_offset:
            self.follower_caught_up_s[replica_id] = now
        return new_life

    def note_log_end_moved(self, previous_end: int) -> None:
        """Leader: an append moved the log end past `previous_end`. A follower that held up to it
        at its session's last fetch was caught up then, which `caught_up_s` read from the session
        until now: kept, as Kafka's lastCaughtUpTime ("fetched at least the leader's log end as of
        the previous fetch"). Without it a follower last naming this partition longer than
        replica.lag.time.max.ms ago (quiet since) left the ISR at a check between this append and
        its next fetch."""
        key = (self.topic, self.partition)
        for replica, end in self.follower_end.items():
            session = self.follower_sessions.get(replica)
            if (
                end >= previous_end
                and session is not None
                and session.holds(key)
                and session.last_fetch_s > self.follower_caught_up_s.get(replica, -math.inf)
            ):
                self.follower_caught_up_s[replica] = session.last_fetch_s

    def low_watermark(self, broker_id: int, live: Collection[int]) -> int:
        """Leader: the smallest log start among its replicas on live brokers (Kafka's
        lowWatermarkIfLeader); -1 while a live follower's is unknown."""
        low = self.log.log_start_offset
        for replica in self.state.replicas:
            if replica != broker_id and replica in live:
                low = min(low, self.follower_log_start.get(replica, -1))
        return low

    def log_start_waiter(self) -> asyncio.Event:
        """An event set when a follower next reports a new log start."""
        if self.log_start_moved is None:
            self.log_start_moved = asyncio.Event()
        return self.log_start_moved

    def wake_produce_waiters(self) -> None:
        """Wake acks=all requests waiting on this partition: the HW moved or the leadership changed."""
        self.high_watermark_moved.set()
        self.high_watermark_moved = asyncio.Event()

    def notify_appended(self) -> None:
        """Records or a high watermark came: `notify_changed`, and written to as of now."""
        self.appended_s = time.monotonic()
        self.notify_changed()

    def notify_changed(self) -> None:
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
