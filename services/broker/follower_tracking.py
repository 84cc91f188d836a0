"""The leader's side of replication: what each follower's fetch says (its position, its life, its
fetch session), the high watermark that follows from it, and which partitions the ISR check
(isr_manager.py) must look at.

`isr_watch` holds the partitions whose ISR could change. A partition leaves it once settled (every
replica in the ISR, each at our log end through a live session) and comes back on whatever could
unsettle it: an append, a state change, a follower's new life, its session going quiet or closing.
Idle, the ISR check costs nothing per partition.
"""

from __future__ import annotations

from collections.abc import Mapping

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
        sessions.on_close = self.session_closed

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
            if hosted.follower_incarnation.get(replica_id) != incarnation:
                self.isr_watch.add(key)  # a new life: judged afresh
            log_start = fetch.log_start_offset if fetch.HasField("log_start_offset") else None
            if hosted.note_follower_fetch(
                replica_id, incarnation, fetch.fetch_offset, now, session, log_start=log_start
            ):
                new_lives.append(key)
            hosted.advance_high_watermark(self.broker_id)
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
