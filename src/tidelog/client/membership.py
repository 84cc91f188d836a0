"""A group member's standing in its group (Kafka's AbstractCoordinator MemberState and generation).

    UNJOINED ──JoinGroup sent──▶ JOINING ──joined a generation──▶ SYNCING ──assignment──▶ STABLE
        ▲                          │  ▲                              │                      │
        │                          │  └──────── rebalance: rejoin ───┼──────────────────────┘
        └── join or sync failed, ──┴──────────────────────────────────┘
            membership lost, left
    CLOSED: from anywhere, for good.

The phase is the state; the member id and generation are the data the coordinator gave, kept
across a rejoin (heartbeats and commits go on under the old generation while a rebalance runs, as
in Kafka) and cleared when the membership is lost or left. `rejoin_needed` is set by whatever
learns of a rebalance (a heartbeat, a commit, a cooperative revocation); the next poll rejoins.
Every phase change goes through `move`, which refuses one the table does not list.
"""

from __future__ import annotations

import enum
from typing import Final, Protocol

from tidelog.client.cluster_metadata import TopicPartition
from tidelog.common.errors import ErrorCode
from tidelog.common.state_machine import Transitions

__all__ = ["TRANSITIONS", "MemberState", "Membership", "RebalanceListener"]


class MemberState(enum.Enum):
    UNJOINED = "unjoined"
    JOINING = "joining"  # JoinGroup sent (Kafka's PREPARING_REBALANCE)
    SYNCING = "syncing"  # joined a generation, SyncGroup sent (COMPLETING_REBALANCE)
    STABLE = "stable"  # a generation and an assignment
    CLOSED = "closed"


TRANSITIONS: Final = Transitions(
    "a group member",
    {
        MemberState.UNJOINED: {MemberState.UNJOINED, MemberState.JOINING, MemberState.CLOSED},
        MemberState.JOINING: {MemberState.SYNCING, MemberState.UNJOINED, MemberState.CLOSED},
        MemberState.SYNCING: {MemberState.STABLE, MemberState.UNJOINED, MemberState.CLOSED},
        MemberState.STABLE: {MemberState.JOINING, MemberState.UNJOINED, MemberState.CLOSED},
        MemberState.CLOSED: set(),
    },
)

NO_GENERATION: Final = -1


class Membership:
    def __init__(self, *, static: bool) -> None:
        self.static = static  # group.instance.id set: leaving keeps the member id (the place)
        self.state = MemberState.UNJOINED
        self.member_id = ""
        self.generation_id = NO_GENERATION
        self.protocol = ""
        self.rejoin_needed = False

    def move(self, target: MemberState) -> None:
        TRANSITIONS.check(self.state, target)
        self.state = target

    def at(self, state: MemberState) -> bool:
        """Whether the member is in `state` (a call, not a comparison: the state changes across awaits)."""
        return self.state is state

    @property
    def has_generation(self) -> bool:
        return self.generation_id != NO_GENERATION

    @property
    def must_join(self) -> bool:
        return self.rejoin_needed or not self.has_generation

    def begin_join(self) -> None:
        self.move(MemberState.JOINING)
        self.rejoin_needed = False

    def joined(self, member_id: str, generation_id: int, protocol: str) -> None:
        self.move(MemberState.SYNCING)
        assert generation_id >= 0, "a joined generation is never negative"
        self.member_id, self.generation_id, self.protocol = member_id, generation_id, protocol

    def synced(self) -> None:
        self.move(MemberState.STABLE)

    def join_failed(self) -> None:
        """JoinGroup or SyncGroup answered an error, failed or was cancelled: rejoin next time.
        A join that left or closed meanwhile has nothing to undo."""
        if self.state in (MemberState.JOINING, MemberState.SYNCING):
            self.move(MemberState.UNJOINED)
        self.rejoin_needed = True

    def lose(self, code: int) -> None:
        """The coordinator no longer knows this membership (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION,
        FENCED_INSTANCE_ID). A join under way carries on and settles the phase itself."""
        self.generation_id = NO_GENERATION
        if code != ErrorCode.ILLEGAL_GENERATION:
            self.member_id = ""
        self.rejoin_needed = True
        if self.state is MemberState.STABLE:
            self.move(MemberState.UNJOINED)

    def leave(self) -> None:
        """Left the group (LeaveGroup sent, or a static member stepping out): no generation."""
        if not self.static:
            self.member_id = ""
        self.generation_id = NO_GENERATION
        self.rejoin_needed = True
        if self.state is not MemberState.CLOSED:
            self.move(MemberState.UNJOINED)

    def close(self) -> None:
        if self.state is not MemberState.CLOSED:
            self.move(MemberState.CLOSED)


class RebalanceListener(Protocol):
    """What a group consumer calls as its assignment changes (Kafka's ConsumerRebalanceListener)."""

    async def on_partitions_revoked(self, partitions: set[TopicPartition]) -> None: ...
    async def on_partitions_assigned(self, partitions: set[TopicPartition]) -> None: ...
    async def on_partitions_lost(self, partitions: set[TopicPartition]) -> None: ...
