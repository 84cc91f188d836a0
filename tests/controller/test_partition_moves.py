"""Reassignment phases and leader balance, as pure functions over metadata records."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidelog.common.errors import ErrorCode, InvalidReplicaAssignmentError
from tidelog.controller import reassignment
from tidelog.controller.leader_balance import imbalanced_partitions, preferred_state, unclean_state
from tidelog.server_common.metadata import PartitionStateRecord


def state(leader: int, isr: list[int], epoch: int = 3) -> PartitionStateRecord:
    return PartitionStateRecord(leader=leader, isr=isr, leader_epoch=epoch, partition_epoch=7, controller_epoch=1)


def test_phase_u_puts_the_target_first_and_names_what_is_added_and_removed() -> None:
    moving = reassignment.plan([1, 2, 3], [3, 4, 5], live={1, 2, 3, 4, 5})
    assert moving.replicas == [3, 4, 5, 1, 2]
    assert (moving.adding, moving.removing) == ([4, 5], [1, 2])
    assert (moving.target, moving.original) == ([3, 4, 5], [1, 2, 3])


@pytest.mark.parametrize(
    ("target", "message"), [([], "empty"), ([2, 2], "twice"), ([2, 9], r"brokers \[9\] are not registered")]
)
def test_bad_targets_are_refused(target: list[int], message: str) -> None:
    with pytest.raises(InvalidReplicaAssignmentError, match=message):
        reassignment.plan([1, 2], target, live={1, 2, 3})


def test_phase_a_ends_when_every_target_replica_is_in_sync() -> None:
    moving = reassignment.plan([1, 2], [2, 3], live={1, 2, 3})
    assert not reassignment.target_in_sync(moving, state(1, [1, 2]))
    assert reassignment.target_in_sync(moving, state(1, [1, 2, 3]))


def test_phase_b_moves_the_leader_into_the_target_and_trims_the_isr() -> None:
    moving = reassignment.plan([1, 2], [2, 3], live={1, 2, 3})
    finished = reassignment.finish(moving, state(1, [1, 2, 3]), live={1, 2, 3}, controller_epoch=4)
    assert finished is not None
    assert (finished.leader, finished.isr, finished.leader_epoch) == (2, [2, 3], 4)
    assert finished.partition_epoch == 8 and finished.controller_epoch == 4
    kept = reassignment.finish(moving, state(2, [1, 2, 3]), live={1, 2, 3}, controller_epoch=4)
    assert kept is not None and (kept.leader, kept.leader_epoch) == (2, 3)  # no leader change, no new epoch
    assert reassignment.finish(moving, state(1, [1]), live={1, 2, 3}, controller_epoch=4) is None


def test_cancelling_turns_the_added_replicas_into_the_removed_ones() -> None:
    moving = reassignment.plan([1, 2], [2, 3, 4], live={1, 2, 3, 4})
    back = reassignment.cancel(moving)
    assert back.target == [1, 2] and back.removing == [3, 4] and back.adding == []
    finished = reassignment.finish(back, state(1, [1, 2, 3]), live={1, 2, 3, 4}, controller_epoch=4)
    assert finished is not None and (finished.leader, finished.isr) == (1, [1, 2])


@given(
    original=st.lists(st.integers(1, 6), min_size=1, max_size=4, unique=True),
    target=st.lists(st.integers(1, 6), min_size=1, max_size=4, unique=True),
)
def test_plan_and_cancel_round_trip(original: list[int], target: list[int]) -> None:
    moving = reassignment.plan(original, target, live=set(range(1, 7)))
    assert set(moving.replicas) == set(original) | set(target)
    assert moving.target == target
    assert sorted(moving.original) == sorted(original)
    assert sorted(reassignment.cancel(moving).target) == sorted(original)


def test_preferred_election() -> None:
    assert preferred_state([1, 2, 3], state(1, [1, 2, 3]), {1, 2, 3}, 2) == ErrorCode.ELECTION_NOT_NEEDED
    assert preferred_state([1, 2, 3], state(2, [2, 3]), {1, 2, 3}, 2) == ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
    assert preferred_state([1, 2, 3], state(2, [1, 2, 3]), {2, 3}, 2) == ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
    moved = preferred_state([1, 2, 3], state(2, [1, 2, 3]), {1, 2, 3}, 2)
    assert isinstance(moved, PartitionStateRecord) and (moved.leader, moved.leader_epoch) == (1, 4)


def test_unclean_election_only_for_leaderless_partitions() -> None:
    assert unclean_state([1, 2], state(1, [1]), {1, 2}, 2) == ErrorCode.ELECTION_NOT_NEEDED
    assert unclean_state([1, 2], state(-1, [1]), set(), 2) == ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE
    elected = unclean_state([1, 2], state(-1, [1]), {2}, 2)
    assert isinstance(elected, PartitionStateRecord) and (elected.leader, elected.isr) == (2, [2])


def test_imbalance_moves_only_brokers_over_the_threshold() -> None:
    assignments = {("t", p): [1 + p % 3, 1 + (p + 1) % 3] for p in range(9)}  # each broker prefers 3
    states = {key: state(replicas[0], replicas) for key, replicas in assignments.items()}
    assert imbalanced_partitions(assignments, states, {1, 2, 3}, 10) == []
    states[("t", 0)] = state(2, [1, 2])  # broker 1 leads 2 of its 3: 33% > 10%
    states[("t", 3)] = state(2, [2])  # ... but not in sync here: cannot move
    assert imbalanced_partitions(assignments, states, {1, 2, 3}, 10) == [("t", 0)]
    assert imbalanced_partitions(assignments, states, {1, 2, 3}, 70) == []
    assert imbalanced_partitions(assignments, states, {2, 3}, 10) == []  # broker 1 is not live
