"""A broker's fencing while its etcd session is lost (ADR 0013), as an explicit state machine on an
injected clock.

    IN_SESSION ──session lost──▶ SESSION_LOST ──registered again──▶ REGISTERED_AGAIN
        ▲                             ▲                                  │     │
        │                             └────────── session lost ──────────┘     │
        └──────────────── a controller's whole state applied ──────────────────┘

If only this broker is cut off, the controller may already have given its leaderships to others;
if etcd is down for everyone, nobody can, and it still leads. The followers tell which: a follower
the controller re-pointed stops fetching from us. So while fencing is armed (any state but
IN_SESSION), a partition whose in-sync followers have not all fetched within
replica.lag.time.max.ms is led no more (`fenced_out`). Fencing is lifted only by the first whole
state a controller pushes after the broker registered again: a push before that may predate the
controller seeing the broker back, and a session lost again meanwhile needs a registration again.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Iterable
from typing import Final

import structlog

from tidelog.common.state_machine import Transitions

__all__ = ["TRANSITIONS", "BrokerFencing", "FencingState"]

log = structlog.get_logger(__name__)


class FencingState(enum.Enum):
    IN_SESSION = "in-session"
    SESSION_LOST = "session-lost"  # armed: fenced_out applies
    REGISTERED_AGAIN = "registered-again"  # armed still, until a controller's whole state arrives


TRANSITIONS: Final = Transitions(
    "a broker's fencing",
    {
        FencingState.IN_SESSION: {FencingState.SESSION_LOST},
        FencingState.SESSION_LOST: {FencingState.REGISTERED_AGAIN},
        FencingState.REGISTERED_AGAIN: {FencingState.IN_SESSION, FencingState.SESSION_LOST},
    },
)


class BrokerFencing:
    def __init__(self, broker_id: int, lag_time_max_s: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.broker_id = broker_id
        self.lag_time_max_s = lag_time_max_s  # replica.lag.time.max.ms
        self.clock = clock
        self.state = FencingState.IN_SESSION

    def _move(self, target: FencingState) -> None:
        TRANSITIONS.check(self.state, target)
        self.state = target

    @property
    def armed(self) -> bool:
        return self.state is not FencingState.IN_SESSION

    def session_lost(self) -> None:
        """No keep-alive answered within the session's TTL (again, if a registration was pending)."""
        if self.state is FencingState.SESSION_LOST:
            return
        log.warning("broker_session_lost_fencing_armed", broker=self.broker_id, was=self.state.value)
        self._move(FencingState.SESSION_LOST)

    def registered_again(self) -> None:
        """A new session holds our registration: the next whole-state push lifts the fence."""
        self._move(FencingState.REGISTERED_AGAIN)

    def lifted_by_whole_state(self) -> bool:
        """A controller's whole state was applied: lifts the fence if we registered again since the
        session was lost. True when it did."""
        if self.state is not FencingState.REGISTERED_AGAIN:
            return False
        self._move(FencingState.IN_SESSION)
        log.info("broker_fencing_lifted", broker=self.broker_id)
        return True

    def fenced_out(self, isr: Iterable[int], fetched_s: Callable[[int], float]) -> bool:
        """Armed, and an in-sync follower has not fetched from us within replica.lag.time.max.ms
        (`fetched_s(follower)`: when it last did, on this clock)."""
        if not self.armed:
            return False
        horizon = self.clock() - self.lag_time_max_s
        return any(fetched_s(member) < horizon for member in isr if member != self.broker_id)
