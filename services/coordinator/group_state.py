"""The states of a consumer group and the transitions between them (Kafka's GroupState).

    Empty ──join──▶ PreparingRebalance ──all joined / timeout──▶ CompletingRebalance
      ▲                 ▲        │                                   │
      │                 │        └── everyone left ──▶ Empty          │ leader's SyncGroup
      │                 └──── join, leave, member expired ◀── Stable ◀┘
      └── last member left / expired (from Stable or CompletingRebalance)

    Dead: the group was deleted, or its partition moved to another coordinator instance.

Every change goes through `transition`, which refuses one the table does not list.
"""

from __future__ import annotations

import enum
from typing import Final

__all__ = ["GroupState", "IllegalTransitionError", "check_transition"]


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


# The states each state may be entered from (Kafka's validPreviousStates).
VALID_PREVIOUS: Final[dict[GroupState, frozenset[GroupState]]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE, GroupState.EMPTY}),
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.EMPTY, GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.PREPARING_REBALANCE}
    ),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.DEAD: frozenset(
        {
            GroupState.EMPTY,
            GroupState.PREPARING_REBALANCE,
            GroupState.COMPLETING_REBALANCE,
            GroupState.STABLE,
            GroupState.DEAD,
        }
    ),
}


class IllegalTransitionError(AssertionError):
    pass


def check_transition(current: GroupState, target: GroupState) -> None:
    if current not in VALID_PREVIOUS[target]:
        raise IllegalTransitionError(f"a group cannot go from {current.value} to {target.value}")
