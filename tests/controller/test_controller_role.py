"""The controller's role state machine: the legal moves, the events kept in step, epochs only growing."""

from __future__ import annotations

import pytest

from tidelog.controller.controller_role import LEGAL_TRANSITIONS, ControllerRole, Role


async def test_a_term_from_campaign_to_deposed_and_back() -> None:
    role = ControllerRole(1)
    assert role.current is Role.CANDIDATE and not role.active.is_set()
    assert role.move(Role.LOADING)
    role.lead_under(4)
    assert role.move(Role.ACTIVE)
    assert role.is_active and role.active.is_set()
    assert role.move(Role.DEPOSED)
    assert role.deposed.is_set() and not role.active.is_set()
    assert not role.move(Role.DEPOSED), "already deposed: nothing changes"
    assert role.move(Role.CANDIDATE)
    assert not role.deposed.is_set()
    role.move(Role.LOADING)
    with pytest.raises(AssertionError, match="controller epoch went back"):
        role.lead_under(4)


async def test_stopping_is_final() -> None:
    role = ControllerRole(1)
    role.move(Role.LOADING)
    assert role.move(Role.STOPPING)
    assert role.stopping.is_set()
    assert not role.move(Role.CANDIDATE) and role.current is Role.STOPPING
    assert LEGAL_TRANSITIONS.legal[Role.STOPPING] == frozenset()


async def test_no_shortcuts() -> None:
    role = ControllerRole(1)
    with pytest.raises(AssertionError, match="from candidate to active"):
        role.move(Role.ACTIVE)  # only through LOADING: the epoch is claimed and state loaded first
    role.move(Role.LOADING)
    role.lead_under(1)
    role.move(Role.ACTIVE)
    with pytest.raises(AssertionError, match="from active to candidate"):
        role.move(Role.CANDIDATE)  # a term ends as DEPOSED (or STOPPING), never silently
