"""The replica role state machine: legal moves, and the epoch invariants asserted where state changes."""

from __future__ import annotations

import pytest

from tidelog.broker.replica_role import LEGAL_TRANSITIONS, ReplicaRole, role_in, transition
from tidelog.v1 import common_pb2

ME = 1


def _state(leader: int, leader_epoch: int, partition_epoch: int) -> common_pb2.PartitionState:
    return common_pb2.PartitionState(
        topic="t", partition=0, leader=leader, leader_epoch=leader_epoch, partition_epoch=partition_epoch
    )


def test_the_role_follows_the_leader() -> None:
    assert role_in(_state(ME, 1, 1), ME) is ReplicaRole.LEADER
    assert role_in(_state(2, 1, 1), ME) is ReplicaRole.FOLLOWER
    assert role_in(_state(-1, 1, 1), ME) is ReplicaRole.OFFLINE


def test_leadership_moves_with_growing_epochs() -> None:
    led = _state(ME, 3, 7)
    assert transition(ReplicaRole.LEADER, led, _state(2, 4, 8), ME) is ReplicaRole.FOLLOWER
    assert transition(ReplicaRole.LEADER, led, _state(ME, 3, 8), ME) is ReplicaRole.LEADER  # an ISR change
    assert transition(ReplicaRole.FOLLOWER, _state(2, 4, 8), _state(-1, 5, 9), ME) is ReplicaRole.OFFLINE
    assert transition(ReplicaRole.OFFLINE, _state(-1, 5, 9), _state(ME, 6, 10), ME) is ReplicaRole.LEADER


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (_state(ME, 3, 7), _state(ME, 3, 6), "partition epochs never go back"),
        (_state(ME, 3, 7), _state(ME, 2, 8), "leader epochs never go back"),
        (_state(ME, 3, 7), _state(2, 3, 8), "a new leader comes with a new leader epoch"),
    ],
)
def test_an_epoch_going_back_is_refused(
    old: common_pb2.PartitionState, new: common_pb2.PartitionState, message: str
) -> None:
    with pytest.raises(AssertionError, match=message):
        transition(ReplicaRole.LEADER, old, new, ME)


def test_nothing_comes_back_from_deleted() -> None:
    assert LEGAL_TRANSITIONS.legal[ReplicaRole.DELETED] == frozenset()
    with pytest.raises(AssertionError, match="deleted replica"):
        transition(ReplicaRole.DELETED, _state(ME, 1, 1), _state(ME, 1, 2), ME)
    for role in (ReplicaRole.LEADER, ReplicaRole.FOLLOWER, ReplicaRole.OFFLINE):
        assert ReplicaRole.DELETED in LEGAL_TRANSITIONS.legal[role]
