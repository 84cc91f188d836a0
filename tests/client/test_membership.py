"""A group member's phases: only the listed moves, and what each event does to id and generation."""

from __future__ import annotations

import pytest

from tidelog.client.membership import Membership, MemberState
from tidelog.common.errors import ErrorCode
from tidelog.common.state_machine import IllegalTransitionError

LEGAL = {
    (MemberState.UNJOINED, MemberState.UNJOINED),
    (MemberState.UNJOINED, MemberState.JOINING),
    (MemberState.JOINING, MemberState.SYNCING),
    (MemberState.JOINING, MemberState.UNJOINED),
    (MemberState.SYNCING, MemberState.STABLE),
    (MemberState.SYNCING, MemberState.UNJOINED),
    (MemberState.STABLE, MemberState.JOINING),
    (MemberState.STABLE, MemberState.UNJOINED),
    *((state, MemberState.CLOSED) for state in MemberState if state is not MemberState.CLOSED),
}


@pytest.mark.parametrize("source", list(MemberState))
@pytest.mark.parametrize("target", list(MemberState))
def test_only_the_listed_moves_are_allowed(source: MemberState, target: MemberState) -> None:
    membership = Membership(static=False)
    membership.state = source
    if (source, target) in LEGAL:
        membership.move(target)
        assert membership.state is target
    else:
        with pytest.raises(IllegalTransitionError):
            membership.move(target)


def _stable(static: bool = False) -> Membership:
    membership = Membership(static=static)
    assert membership.must_join
    membership.begin_join()
    membership.joined("m-1", 4, "range")
    membership.synced()
    assert (membership.state, membership.must_join) == (MemberState.STABLE, False)
    return membership


def test_a_rebalance_keeps_the_generation_until_the_next_join_answers() -> None:
    membership = _stable()
    membership.rejoin_needed = True
    membership.begin_join()
    assert (membership.generation_id, membership.member_id) == (4, "m-1")  # heartbeats go on under it
    membership.joined("m-1", 5, "range")
    assert membership.generation_id == 5


@pytest.mark.parametrize(
    ("code", "member_id"),
    [(ErrorCode.UNKNOWN_MEMBER_ID, ""), (ErrorCode.ILLEGAL_GENERATION, "m-1"), (ErrorCode.FENCED_INSTANCE_ID, "")],
)
def test_a_lost_membership_drops_the_generation_and_rejoins(code: ErrorCode, member_id: str) -> None:
    membership = _stable()
    membership.lose(code)
    assert (membership.state, membership.generation_id, membership.member_id) == (
        MemberState.UNJOINED,
        -1,
        member_id,
    )
    assert membership.must_join


def test_a_loss_during_a_join_leaves_the_phase_to_the_join() -> None:
    membership = _stable()
    membership.rejoin_needed = True
    membership.begin_join()
    membership.lose(ErrorCode.UNKNOWN_MEMBER_ID)  # a heartbeat's answer, while JoinGroup is out
    assert membership.state is MemberState.JOINING
    membership.joined("m-2", 6, "range")  # the join's own answer settles it
    assert membership.state is MemberState.SYNCING


def test_leaving_keeps_a_static_members_id_only() -> None:
    dynamic, static = _stable(), _stable(static=True)
    dynamic.leave()
    static.leave()
    assert (dynamic.member_id, static.member_id) == ("", "m-1")
    assert dynamic.generation_id == static.generation_id == -1
    assert dynamic.state is static.state is MemberState.UNJOINED


def test_a_failed_join_goes_back_to_unjoined_and_asks_to_rejoin() -> None:
    membership = Membership(static=False)
    membership.begin_join()
    membership.join_failed()
    assert membership.state is MemberState.UNJOINED and membership.rejoin_needed
    membership.close()
    membership.join_failed()  # a join cancelled by close(): nothing to undo
    assert membership.state is MemberState.CLOSED
