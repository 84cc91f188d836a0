"""Preferred-leader election and the automatic leader rebalance (auto.leader.rebalance.enable).

A partition's preferred leader is its first assigned replica; topic creation spreads those over
the brokers, so leading by preference spreads the load. After failovers leadership bunches up on
the survivors: a preferred election moves it back once the preferred replica is alive and in sync.
The rebalance does that by itself for every broker whose share of partitions led by someone else
exceeds `leader.imbalance.per.broker.percentage`. Pure functions; the controller commits.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from tidelog.common.errors import ErrorCode
from tidelog.server_common.metadata import PartitionStateRecord

__all__ = ["imbalanced_partitions", "preferred_state", "unclean_state"]

PartitionKey = tuple[str, int]


def preferred_state(
    replicas: list[int], state: PartitionStateRecord, live: Collection[int], controller_epoch: int
) -> PartitionStateRecord | ErrorCode:
    """The state with the preferred replica leading, or why not (ELECTION_NOT_NEEDED, ...)."""
    preferred = replicas[0]
    if state.leader == preferred:
        return ErrorCode.ELECTION_NOT_NEEDED
    if preferred not in live or preferred not in state.isr:
        return ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
    return state.changed(leader=preferred, controller_epoch=controller_epoch)


def unclean_state(
    replicas: list[int], state: PartitionStateRecord, live: Collection[int], controller_epoch: int
) -> PartitionStateRecord | ErrorCode:
    """For a partition without a live leader: any live replica leads, alone in the ISR."""
    if state.leader in live:
        return ErrorCode.ELECTION_NOT_NEEDED
    candidates = [broker for broker in replicas if broker in live]
    if not candidates:
        return ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE
    return state.changed(leader=candidates[0], isr=[candidates[0]], controller_epoch=controller_epoch)


def imbalanced_partitions(
    assignments: Mapping[PartitionKey, list[int]],
    states: Mapping[PartitionKey, PartitionStateRecord],
    live: Collection[int],
    percentage: int,
) -> list[PartitionKey]:
    """Partitions to hand back to their preferred leaders: those of every live broker whose
    ratio of preferred-but-not-led partitions is above `percentage`, where the move can happen."""
    preferred_by: dict[int, list[PartitionKey]] = {}
    for key, replicas in assignments.items():
        if key in states and replicas:
            preferred_by.setdefault(replicas[0], []).append(key)
    moves: list[PartitionKey] = []
    for broker, keys in sorted(preferred_by.items()):
        if broker not in live:
            continue
        not_led = [key for key in keys if states[key].leader != broker]
        if len(not_led) * 100 > percentage * len(keys):
            moves.extend(key for key in not_led if broker in states[key].isr)
    return sorted(moves)
