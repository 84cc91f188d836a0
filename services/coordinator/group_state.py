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

from tidelog.common.state_machine import IllegalTransitionError, Transitions

__all__ = ["TRANSITIONS", "GroupState", "IllegalTransitionError", "check_transition"]


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


# Kafka's validPreviousStates, written the other way round: each state and where it may go.
TRANSITIONS: Final = Transitions(
    "a group",
    {
        GroupState.EMPTY: {GroupState.EMPTY, GroupState.PREPARING_REBALANCE, GroupState.DEAD},
        GroupState.PREPARING_REBALANCE: {
            GroupState.PREPARING_REBALANCE,
            GroupState.COMPLETING_REBALANCE,
            GroupState.EMPTY,
            GroupState.DEAD,
        },
        GroupState.COMPLETING_REBALANCE: {GroupState.STABLE, GroupState.PREPARING_REBALANCE, GroupState.DEAD},
        GroupState.STABLE: {GroupState.PREPARING_REBALANCE, GroupState.DEAD},
        GroupState.DEAD: {GroupState.DEAD},
    },
)


def check_transition(current: GroupState, target: GroupState) -> None:
    TRANSITIONS.check(current, target)
