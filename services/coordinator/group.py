"""One consumer group's state in memory: members, generation, assignment, committed offsets (and
those committed in transactions still open).

Owned by the GroupCoordinator, used from its event loop only. Joins and syncs in progress are
futures the coordinator completes when the rebalance step ends (Kafka's delayed operations).
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import time
import uuid

from tidelog.coordinator.group_state import GroupState, check_transition
from tidelog.v1 import coordinator_pb2

__all__ = ["Group", "Member", "OffsetEntry"]


@dataclasses.dataclass(slots=True)
class Member:
    member_id: str
    group_instance_id: str
    client_id: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: list[tuple[str, bytes]]  # (assignor name, subscription metadata), preferred first
    assignment: bytes = b""
    last_heartbeat: float = dataclasses.field(default_factory=time.monotonic)
    join: asyncio.Future[coordinator_pb2.JoinGroupResponse] | None = None
    sync: asyncio.Future[coordinator_pb2.SyncGroupResponse] | None = None

    def metadata_for(self, protocol: str) -> bytes:
        return next((metadata for name, metadata in self.protocols if name == protocol), b"")

    def expired(self, now: float) -> bool:
        # A member waiting in JoinGroup is bounded by the rebalance timeout instead.
        return self.join is None and now - self.last_heartbeat > self.session_timeout_ms / 1000


@dataclasses.dataclass(frozen=True, slots=True)
class OffsetEntry:
    offset: int
    metadata: str
    commit_timestamp_ms: int


def new_member_id(client_id: str) -> str:
    """A member id as Kafka's coordinator makes them: the client id, "-", a UUID."""
    return f"{client_id or 'member'}-{uuid.uuid4()}"


class Group:
    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.state = GroupState.EMPTY
        self.protocol_type = ""
        self.protocol_name = ""
        self.generation_id = 0
        self.leader = ""
        self.members: collections.OrderedDict[str, Member] = collections.OrderedDict()  # join order
        self.static_members: dict[str, str] = {}  # group.instance.id → member id
        self.offsets: dict[tuple[str, int], OffsetEntry] = {}
        # Committed inside transactions not ended yet, by producer id (KIP-98): they join `offsets`
        # when the transaction's COMMIT marker lands in the group's partition, and go on ABORT.
        self.pending_txn_offsets: dict[int, dict[tuple[str, int], OffsetEntry]] = {}
        self.empty_since_ms = 0
        self.rebalance_deadline = 0.0  # PreparingRebalance: members not rejoined by then are removed
        self.join_ready_at = 0.0  # group.initial.rebalance.delay.ms: the first join waits for others
        # KIP-394: member ids handed to first joins, until when (monotonic s): members once they join
        self.pending_members: dict[str, float] = {}

    def transition(self, target: GroupState) -> None:
        check_transition(self.state, target)
        self.state = target

    @property
    def all_joined(self) -> bool:
        return bool(self.members) and all(member.join is not None for member in self.members.values())

    def add(self, member: Member) -> None:
        self.members[member.member_id] = member
        if member.group_instance_id:
            self.static_members[member.group_instance_id] = member.member_id
        if not self.leader:
            self.leader = member.member_id

    def hand_out(self, client_id: str, now: float, session_s: float) -> str:
        """KIP-394: a member id for a first join, pending until it joins with it; forgotten after a
        session timeout unused (the expired ones go here: the map holds at most a session's worth)."""
        self.pending_members = {pending: until for pending, until in self.pending_members.items() if until > now}
        member_id = new_member_id(client_id)
        self.pending_members[member_id] = now + session_s
        return member_id

    def take_pending(self, member_id: str, now: float) -> bool:
        """True if `member_id` was handed out and has not expired: it may join now."""
        return self.pending_members.pop(member_id, 0.0) > now

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        if member.group_instance_id and self.static_members.get(member.group_instance_id) == member_id:
            del self.static_members[member.group_instance_id]
        if self.leader == member_id:
            self.leader = next(iter(self.members), "")
        return member

    def choose_protocol(self) -> str | None:
        """The assignor every member supports with the most first-choice votes (seed 004's vote)."""
        members = list(self.members.values())
        common = set.intersection(*({name for name, _ in member.protocols} for member in members))
        if not common:
            return None
        votes: collections.Counter[str] = collections.Counter()
        for member in members:
            votes[next(name for name, _ in member.protocols if name in common)] += 1
        first_choice_order = [name for name, _ in members[0].protocols if name in common]
        return max(first_choice_order, key=lambda name: (votes[name], -first_choice_order.index(name)))

    def supports(self, protocols: list[tuple[str, bytes]]) -> bool:
        """A joining member must share at least one assignor with everyone already in."""
        if not self.members:
            return True
        names = {name for name, _ in protocols}
        return any(
            all(name in {own for own, _ in member.protocols} for member in self.members.values()) for name in names
        )
