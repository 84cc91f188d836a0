"""Partition reassignment that can be cancelled mid-way (KIP-455; the seeds' phases U, A and B).

Terms (as the seeds name them): RS the replica set while the move is under way, ORS the original
set, TRS the target set, AR = TRS − ORS the replicas being added, RR = ORS − TRS those leaving.

    U  record RS = TRS + (ORS − TRS), AR and RR in the topic record: the added replicas start
       copying from the leader.
    A  wait until every replica of TRS is in the ISR (the added ones caught up).
    B  the leader moves into TRS if it is not there, RS becomes TRS, the ISR keeps only TRS, and
       RR's replicas are stopped and deleted.

Cancelling is only meaningful before B: TRS becomes ORS again (which was in sync) and B runs at
once, removing the added replicas instead. Pure functions over records; the controller commits.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection

from tidelog.common.errors import InvalidReplicaAssignmentError
from tidelog.server_common.metadata import PartitionStateRecord

__all__ = ["Reassignment", "cancel", "finish", "plan", "target_in_sync"]


@dataclasses.dataclass(frozen=True, slots=True)
class Reassignment:
    replicas: list[int]  # RS
    adding: list[int]  # AR
    removing: list[int]  # RR
    original: list[int]  # ORS in its own order (RS puts TRS first), so a cancel restores it exactly

    @property
    def target(self) -> list[int]:
        """TRS, in its preferred order."""
        return [broker for broker in self.replicas if broker not in self.removing]


def plan(original: list[int], target: list[int], live: Collection[int]) -> Reassignment:
    """Phase U: check the target and compute RS, AR and RR."""
    if not target:
        raise InvalidReplicaAssignmentError("the target replica list is empty")
    if len(set(target)) != len(target):
        raise InvalidReplicaAssignmentError(f"replicas {target} name a broker twice")
    unknown = sorted(set(target) - set(live))
    if unknown:
        raise InvalidReplicaAssignmentError(f"brokers {unknown} are not registered")
    return Reassignment(
        replicas=target + [broker for broker in original if broker not in target],
        adding=[broker for broker in target if broker not in original],
        removing=[broker for broker in original if broker not in target],
        original=list(original),
    )


def cancel(reassignment: Reassignment) -> Reassignment:
    """Back to ORS: the added replicas become the ones to remove."""
    original = reassignment.original
    return Reassignment(
        replicas=original + [broker for broker in reassignment.adding if broker not in original],
        adding=[],
        removing=list(reassignment.adding),
        original=original,
    )


def target_in_sync(reassignment: Reassignment, state: PartitionStateRecord) -> bool:
    """Phase A is over: every replica of TRS is in the ISR."""
    return all(broker in state.isr for broker in reassignment.target)


def finish(
    reassignment: Reassignment, state: PartitionStateRecord, live: Collection[int], controller_epoch: int
) -> PartitionStateRecord | None:
    """Phase B's new partition state (leader inside TRS, ISR within TRS), or None when no replica
    of TRS is both alive and in sync to lead (the move then waits)."""
    target = reassignment.target
    isr = [broker for broker in state.isr if broker in target]
    if state.leader in target and state.leader in live:
        leader = state.leader
    else:
        candidates = [broker for broker in target if broker in isr and broker in live]
        if not candidates:
            return None
        leader = candidates[0]
    assert leader in isr
    return state.changed(leader=leader, isr=isr, controller_epoch=controller_epoch)
