"""Explicit state machines: each states its legal moves in one table, checked on every move.

Five parts of Tidelog keep state this way (a consumer group, a controller's role, a replica's role,
a producer batch, a group member). Each module owns its states and its table; this module is the
one way to write the table and check a move, so they read alike and fail alike: a move the table
does not list is a bug (IllegalTransitionError is an AssertionError), never a runtime condition
to handle.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from typing import Generic, TypeVar

__all__ = ["IllegalTransitionError", "Transitions"]

S = TypeVar("S", bound=enum.Enum)


class IllegalTransitionError(AssertionError):
    """A move its state machine's table does not allow."""


class Transitions(Generic[S]):
    """The legal moves of one state machine: `state → the states it may move to`."""

    def __init__(self, what: str, legal: Mapping[S, Iterable[S]]) -> None:
        self.what = what  # named in the error: "a consumer group", "a producer batch", ...
        self.legal: dict[S, frozenset[S]] = {state: frozenset(targets) for state, targets in legal.items()}
        states = type(next(iter(self.legal)))
        assert set(self.legal) == set(states), f"{what}: the table must list every state of {states.__name__}"

    def allows(self, current: S, target: S) -> bool:
        return target in self.legal[current]

    def check(self, current: S, target: S) -> None:
        if not self.allows(current, target):
            raise IllegalTransitionError(f"{self.what} cannot go from {current.value} to {target.value}")
