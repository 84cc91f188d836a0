"""What a broker's replica of one partition is doing, as an explicit state with legal transitions.

    LEADER    this broker leads in the partition's current leader epoch: appends, serves fetches
    FOLLOWER  another broker leads: the replica fetcher copies from it
    OFFLINE   no leader at all (every ISR member is gone): the replica waits
    DELETED   stopped (StopReplica, topic deleted, not assigned any more): terminal

The role follows from each PartitionState the controller sends; `transition` checks the move is
legal and that the invariants the replication design rests on hold where the state changes:
partition epochs and leader epochs never go back, and a leader epoch changes whenever the leader
does (so "still leader in epoch E" identifies one uninterrupted leadership).
"""

from __future__ import annotations

import enum
from typing import Final

from tidelog.common.state_machine import Transitions
from tidelog.v1 import common_pb2

__all__ = ["LEGAL_TRANSITIONS", "ReplicaRole", "role_in", "transition"]


class ReplicaRole(enum.Enum):
    LEADER = "leader"
    FOLLOWER = "follower"
    OFFLINE = "offline"
    DELETED = "deleted"


_LIVE: Final = frozenset({ReplicaRole.LEADER, ReplicaRole.FOLLOWER, ReplicaRole.OFFLINE})

# Any live role may become any other (a state push can move a replica anywhere); nothing comes
# back from DELETED: a topic created again under the same name is a new Partition object.
LEGAL_TRANSITIONS: Final = Transitions(
    "a replica",
    {
        ReplicaRole.LEADER: _LIVE | {ReplicaRole.DELETED},
        ReplicaRole.FOLLOWER: _LIVE | {ReplicaRole.DELETED},
        ReplicaRole.OFFLINE: _LIVE | {ReplicaRole.DELETED},
        ReplicaRole.DELETED: set(),
    },
)


def role_in(state: common_pb2.PartitionState, broker_id: int) -> ReplicaRole:
    """The role `state` gives the replica on `broker_id`."""
    if state.leader == broker_id:
        return ReplicaRole.LEADER
    return ReplicaRole.FOLLOWER if state.leader >= 0 else ReplicaRole.OFFLINE


def transition(
    current: ReplicaRole, old: common_pb2.PartitionState, new: common_pb2.PartitionState, broker_id: int
) -> ReplicaRole:
    """The role after moving from `old` to `new`; asserts the move is legal and keeps the invariants."""
    assert current is not ReplicaRole.DELETED, f"{new.topic}-{new.partition}: a deleted replica has no next state"
    assert new.partition_epoch >= old.partition_epoch, "partition epochs never go back"
    assert new.leader_epoch >= old.leader_epoch, "leader epochs never go back"
    if new.leader != old.leader:
        assert new.leader_epoch > old.leader_epoch, (
            f"a new leader comes with a new leader epoch: {new.topic}-{new.partition} leader {old.leader} → "
            f"{new.leader} in epoch {old.leader_epoch} → {new.leader_epoch} (partition epoch "
            f"{old.partition_epoch} → {new.partition_epoch})"
        )
    following = role_in(new, broker_id)
    LEGAL_TRANSITIONS.check(current, following)
    return following
