"""The broker's fencing while its etcd session is lost (broker_fencing.py), driven through every
transition of its table on the fake clock."""

from __future__ import annotations

import math

import pytest

from tests.fake_clock import FakeClock
from tidelog.broker.broker_fencing import TRANSITIONS, BrokerFencing, FencingState
from tidelog.common.state_machine import IllegalTransitionError

ME, FOLLOWER = 1, 2
LAG_S = 10.0  # replica.lag.time.max.ms


def _fencing(clock: FakeClock) -> BrokerFencing:
    return BrokerFencing(ME, LAG_S, clock=clock)


def test_in_session_nothing_is_fenced_whatever_the_followers_do() -> None:
    fencing = _fencing(FakeClock())
    assert fencing.state is FencingState.IN_SESSION and not fencing.armed
    assert not fencing.fenced_out([ME, FOLLOWER], lambda replica: -math.inf)  # never fetched: still ours
    assert not fencing.lifted_by_whole_state()


def test_a_lost_session_fences_a_partition_once_an_in_sync_follower_is_quiet_past_the_lag() -> None:
    clock = FakeClock()
    fencing = _fencing(clock)
    last_fetch = clock.now
    fencing.session_lost()
    assert fencing.state is FencingState.SESSION_LOST and fencing.armed
    fenced = fencing.fenced_out([ME, FOLLOWER], lambda replica: last_fetch)
    assert not fenced, "the follower fetched just now: etcd is down for everyone, we still lead"
    clock.advance(LAG_S + 0.001)
    assert fencing.fenced_out([ME, FOLLOWER], lambda replica: last_fetch), "re-pointed elsewhere: led no more"
    assert not fencing.fenced_out([ME], lambda replica: -math.inf), "no follower in the ISR: nobody to tell"
    fencing.session_lost()  # again, while lost: nothing changes
    assert fencing.state is FencingState.SESSION_LOST


def test_only_a_whole_state_after_registering_again_lifts_it() -> None:
    fencing = _fencing(FakeClock())
    fencing.session_lost()
    assert not fencing.lifted_by_whole_state(), "a push before registering again may predate it"
    assert fencing.armed
    fencing.registered_again()
    assert fencing.state is FencingState.REGISTERED_AGAIN and fencing.armed
    assert fencing.lifted_by_whole_state()
    assert fencing.state is FencingState.IN_SESSION and not fencing.armed


def test_a_session_lost_again_before_the_whole_state_needs_a_registration_again() -> None:
    """The two booleans it replaced kept "registered again" through a second loss, so the next push
    lifted a fence the broker's session no longer backed."""
    fencing = _fencing(FakeClock())
    fencing.session_lost()
    fencing.registered_again()
    fencing.session_lost()
    assert fencing.state is FencingState.SESSION_LOST
    assert not fencing.lifted_by_whole_state()
    assert fencing.armed


def test_registering_again_without_a_lost_session_is_a_bug() -> None:
    fencing = _fencing(FakeClock())
    with pytest.raises(IllegalTransitionError, match="in-session to registered-again"):
        fencing.registered_again()


def test_the_table_is_what_the_tests_walk() -> None:
    walked = {
        (FencingState.IN_SESSION, FencingState.SESSION_LOST),
        (FencingState.SESSION_LOST, FencingState.REGISTERED_AGAIN),
        (FencingState.REGISTERED_AGAIN, FencingState.IN_SESSION),
        (FencingState.REGISTERED_AGAIN, FencingState.SESSION_LOST),
    }
    legal = {(state, target) for state, targets in TRANSITIONS.legal.items() for target in targets}
    assert legal == walked
