"""A service's long-lived state kept out of the garbage collector's full collections.

CPython's full (generation 2) collection walks every tracked object the process holds, with the
event loop stopped. A broker hosting 10,000 partitions holds millions of them (each log's
segments, indexes, producer and epoch state, its Partition and fetch-session entries), and each
full collection measured 0.25-1.0 s there: six while a 10,000-partition topic was created, more
under produce load as survivors piled up, every request of the broker held up meanwhile (issue
37's rolling-restart and failover tails). `gc.freeze()` moves every object alive into a permanent
generation that collections skip (the standard library's answer for large, settled heaps).

So a state change that brings much long-lived state (the logs a LeaderAndIsr opens) runs with the
collector off (`loading`: while 10,000 logs opened, five full collections walked the growing heap
again and again, 1-1.5 s of a broker's restart), then freezes everything alive: later full
collections walk only what came after. No collection runs before the freeze: at a 10,000-partition
broker's restart it walked some 470,000 objects for 0.45 s, the event loop stopped and the
controller's push waiting, to find about 200 unreachable ones; those few stay frozen until an
unfreeze (`dropped`) lets the next full collection reclaim them. A new controller's state is
settled after its first push (`PartitionCountWatch`), with the collector on meanwhile: one
failover at 10,000 partitions ran a 0.36 s full collection in the middle of that push. Frozen objects are still
freed by reference counting when dropped; only cycles among them would stay, so a change that drops
as much state (a broker no longer hosting thousands of partitions) unfreezes them, and the next
full collection reclaims them. ADR 0028 has the alternatives.
"""

from __future__ import annotations

import contextlib
import gc
import time
from collections.abc import Iterator
from typing import Final

import structlog

__all__ = ["LONG_LIVED_CHANGE_MIN", "PartitionCountWatch", "dropped", "frozen_objects", "loading", "settled"]

log = structlog.get_logger(__name__)

# Below this many partitions a change is left to the collector as it comes: a full collection
# of a few hundred partitions' objects takes milliseconds, and freezing after every small change
# would keep the garbage cycles of each moment for good.
LONG_LIVED_CHANGE_MIN: Final = 1_000


class _Frozen:
    # The objects frozen, counted once at each freeze and unfreeze: gc.get_freeze_count() walks the
    # whole permanent generation (22 ms for 3 million objects, idle; a broker of 10,000 partitions
    # holds millions, and the GC callback's log line called it after every long collection).
    objects = 0


def frozen_objects() -> int:
    """How many objects the last freeze or unfreeze here left frozen, without walking them."""
    return _Frozen.objects


def settled(partitions: int, *, reason: str) -> bool:
    """After a change that brought `partitions` partitions' long-lived state: with enough of them,
    freeze every object alive (without a collection first: the module's docstring says why).
    Returns whether it froze."""
    if partitions < LONG_LIVED_CHANGE_MIN:
        return False
    started = time.perf_counter()
    gc.freeze()
    _Frozen.objects = gc.get_freeze_count()
    log.info(
        "long_lived_heap_frozen",
        reason=reason,
        partitions=partitions,
        frozen_objects=_Frozen.objects,
        seconds=round(time.perf_counter() - started, 3),
    )
    return True


@contextlib.contextmanager
def loading(partitions: int, *, reason: str) -> Iterator[None]:
    """Around a change that brings `partitions` partitions' long-lived state: with enough of them,
    no collection while it loads, then `settled` (a freeze)."""
    if partitions < LONG_LIVED_CHANGE_MIN:
        yield
        return
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
        settled(partitions, reason=reason)


def dropped(partitions: int, *, reason: str) -> bool:
    """After a change that dropped `partitions` partitions' state: with enough of them, unfreeze,
    so that the next full collection can reclaim the cycles among what was dropped."""
    if partitions < LONG_LIVED_CHANGE_MIN or not (frozen := gc.get_freeze_count()):
        return False
    log.info("long_lived_heap_unfrozen", reason=reason, partitions=partitions, frozen_objects=frozen)
    gc.unfreeze()
    _Frozen.objects = 0
    return True


class PartitionCountWatch:
    """For a service whose long-lived state grows with its partition count (the controller's
    states): settles once the count has grown by LONG_LIVED_CHANGE_MIN since it last did, drops
    once it has shrunk by as many."""

    def __init__(self) -> None:
        self.at = 0  # the count when it last settled or dropped

    def moved_to(self, partitions: int, *, reason: str) -> None:
        if partitions - self.at >= LONG_LIVED_CHANGE_MIN:
            settled(partitions - self.at, reason=reason)
            self.at = partitions
        elif self.at - partitions >= LONG_LIVED_CHANGE_MIN:
            dropped(self.at - partitions, reason=reason)
            self.at = partitions
