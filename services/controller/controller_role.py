"""The controller instance's role, as an explicit state with a table of legal transitions.

    CANDIDATE  campaigning in the etcd election (every instance starts here)
    LOADING    elected: claiming the next controller epoch, loading state, first elections
    ACTIVE     serving admin requests and reacting to brokers, under its epoch
    DEPOSED    lost the election (session gone, a newer epoch, a fenced commit): campaigns again
    STOPPING   shutting down: nothing after it

Other code asks `role.is_active` or waits on the events (`active`, `deposed`, `stopping`) instead
of keeping flags of its own; every move is checked against LEGAL_TRANSITIONS (a table in the form
common/state_machine.py gives every state machine), and the controller epoch an instance leads
under only grows.
"""

from __future__ import annotations

import asyncio
import enum
from typing import Final

import structlog

from tidelog.common.state_machine import Transitions

__all__ = ["LEGAL_TRANSITIONS", "ControllerRole", "Role"]

log = structlog.get_logger(__name__)


class Role(enum.Enum):
    CANDIDATE = "candidate"
    LOADING = "loading"
    ACTIVE = "active"
    DEPOSED = "deposed"
    STOPPING = "stopping"


LEGAL_TRANSITIONS: Final = Transitions(
    "a controller",
    {
        Role.CANDIDATE: {Role.LOADING, Role.STOPPING},
        Role.LOADING: {Role.ACTIVE, Role.DEPOSED, Role.STOPPING},
        Role.ACTIVE: {Role.DEPOSED, Role.STOPPING},
        Role.DEPOSED: {Role.CANDIDATE, Role.STOPPING},
        Role.STOPPING: set(),
    },
)


class ControllerRole:
    def __init__(self, controller_id: int) -> None:
        self.controller_id = controller_id
        self.current = Role.CANDIDATE
        self.epoch = -1  # the controller epoch of the last leadership; -1 before the first
        self.active = asyncio.Event()  # set exactly while ACTIVE
        self.deposed = asyncio.Event()  # set on entering DEPOSED, cleared when campaigning again
        self.stopping = asyncio.Event()  # set on entering STOPPING, never cleared

    @property
    def is_active(self) -> bool:
        return self.current is Role.ACTIVE

    def move(self, to: Role, *, reason: str = "") -> bool:
        """Move to `to`; False (and nothing changes) when already there or stopping."""
        if to is self.current or (self.current is Role.STOPPING and to is not Role.STOPPING):
            return False
        LEGAL_TRANSITIONS.check(self.current, to)
        log.info("controller_role", controller=self.controller_id, role=to.value, was=self.current.value, reason=reason)
        self.current = to
        if to is Role.ACTIVE:
            self.active.set()
        else:
            self.active.clear()
        if to is Role.DEPOSED:
            self.deposed.set()
        elif to is Role.CANDIDATE:
            self.deposed.clear()
        elif to is Role.STOPPING:
            self.stopping.set()
        return True

    def lead_under(self, epoch: int) -> None:
        """LOADING: the controller epoch this leadership claimed; epochs never go back."""
        assert self.current is Role.LOADING, f"an epoch is claimed while loading, not {self.current.name}"
        assert epoch > self.epoch, f"controller epoch went back: {epoch} after {self.epoch}"
        self.epoch = epoch
