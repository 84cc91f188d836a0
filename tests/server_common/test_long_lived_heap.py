"""long_lived_heap: what a service's big state changes do to the garbage collector."""

from __future__ import annotations

import gc
import threading
import time
import weakref
from collections.abc import Iterator

import pytest

from tidelog.server_common import long_lived_heap, runtime_metrics


class _Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: only the collector frees it


@pytest.fixture(autouse=True)
def _thawed() -> Iterator[None]:
    """Each test starts and ends with nothing frozen and the collector on (it is the test
    process's own collector)."""
    gc.unfreeze()
    yield
    gc.unfreeze()
    gc.enable()


def test_a_change_of_a_few_partitions_is_left_to_the_collector() -> None:
    assert not long_lived_heap.settled(long_lived_heap.LONG_LIVED_CHANGE_MIN - 1, reason="test")
    assert gc.get_freeze_count() == 0


def test_a_big_change_freezes_what_lives_without_walking_the_heap_first() -> None:
    kept = _Node()
    garbage = weakref.ref(_Node())  # dropped at once, but a cycle: still there until a collection
    collections: list[int] = []

    def seen(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collections.append(info["generation"])

    gc.callbacks.append(seen)
    try:
        assert long_lived_heap.settled(long_lived_heap.LONG_LIVED_CHANGE_MIN, reason="test")
    finally:
        gc.callbacks.remove(seen)
    assert collections == []  # no pause that walks the whole heap
    assert gc.get_freeze_count() > 0
    assert not any(obj is kept for obj in gc.get_objects())  # in no generation a collection walks
    assert kept.me is kept
    # The garbage went into the freeze too, and a collection reclaims it once unfrozen.
    gc.collect()
    assert garbage() is not None
    assert long_lived_heap.dropped(long_lived_heap.LONG_LIVED_CHANGE_MIN, reason="test")
    gc.collect()
    assert garbage() is None


def test_a_big_change_loads_with_the_collector_off_and_freezes_after() -> None:
    with long_lived_heap.loading(long_lived_heap.LONG_LIVED_CHANGE_MIN, reason="test"):
        assert not gc.isenabled()
    assert gc.isenabled()
    assert gc.get_freeze_count() > 0


def test_a_load_that_fails_turns_the_collector_back_on() -> None:
    with pytest.raises(RuntimeError), long_lived_heap.loading(long_lived_heap.LONG_LIVED_CHANGE_MIN, reason="test"):
        raise RuntimeError("the change failed half-way")
    assert gc.isenabled()


def test_a_small_load_leaves_the_collector_alone() -> None:
    with long_lived_heap.loading(3, reason="test"):
        assert gc.isenabled()
    assert gc.get_freeze_count() == 0


def test_a_collector_turned_off_by_the_process_stays_off() -> None:
    gc.disable()
    with long_lived_heap.loading(long_lived_heap.LONG_LIVED_CHANGE_MIN, reason="test"):
        pass
    assert not gc.isenabled()


def test_dropping_as_much_state_unfreezes_so_its_cycles_can_be_collected() -> None:
    node = _Node()
    long_lived_heap.settled(long_lived_heap.LONG_LIVED_CHANGE_MIN, reason="test")
    dropped = weakref.ref(node)
    del node
    gc.collect()
    assert dropped() is not None  # frozen: the collector never looks at it
    assert not long_lived_heap.dropped(long_lived_heap.LONG_LIVED_CHANGE_MIN - 1, reason="test")
    assert long_lived_heap.dropped(long_lived_heap.LONG_LIVED_CHANGE_MIN, reason="test")
    assert gc.get_freeze_count() == 0
    gc.collect()
    assert dropped() is None


def test_a_partition_count_settles_as_it_grows_by_enough_and_drops_as_it_shrinks() -> None:
    watch = long_lived_heap.PartitionCountWatch()
    least = long_lived_heap.LONG_LIVED_CHANGE_MIN
    watch.moved_to(least - 1, reason="test")
    assert gc.get_freeze_count() == 0 and watch.at == 0  # not enough yet
    watch.moved_to(least + 5, reason="test")  # a topic created
    assert gc.get_freeze_count() > 0 and watch.at == least + 5
    watch.moved_to(least + 5, reason="test")  # every other change: no collection again
    # As counted at the last freeze: gc.get_freeze_count() also drops when another thread of the
    # test process frees a frozen object (a fork-server reader's process record once did).
    frozen = long_lived_heap.frozen_objects()
    _ = [_Node() for _ in range(10)]  # (garbage made meanwhile: a freeze now would count them)
    watch.moved_to(2 * least, reason="test")  # grown, but not by enough since it settled
    assert long_lived_heap.frozen_objects() == frozen
    watch.moved_to(4, reason="test")  # deleted
    assert gc.get_freeze_count() == 0 and watch.at == 4


def test_the_frozen_count_is_kept_at_each_freeze_and_unfreeze() -> None:
    assert long_lived_heap.settled(long_lived_heap.LONG_LIVED_CHANGE_MIN, reason="test")
    # As counted at the freeze: frozen objects freed since (by reference counting) are not subtracted.
    assert 0 < gc.get_freeze_count() <= long_lived_heap.frozen_objects() <= gc.get_freeze_count() + 10
    assert long_lived_heap.dropped(long_lived_heap.LONG_LIVED_CHANGE_MIN, reason="test")
    assert long_lived_heap.frozen_objects() == gc.get_freeze_count() == 0


def test_a_long_collections_log_line_does_not_walk_the_frozen_heap(monkeypatch: pytest.MonkeyPatch) -> None:
    """gc.get_freeze_count() walks every frozen object (22 ms for 3 million here), inside the
    collector's callback: the pause it reported grew by it. The line says the count kept instead."""
    assert long_lived_heap.settled(long_lived_heap.LONG_LIVED_CHANGE_MIN, reason="test")
    frozen = long_lived_heap.frozen_objects()
    walks: list[int] = []
    monkeypatch.setattr(gc, "get_freeze_count", lambda: walks.append(1) or 0)
    logged: list[tuple[str, dict[str, object]]] = []
    monkeypatch.setattr(runtime_metrics, "log", _Recorder(logged))
    # A collection that began a second ago on this thread ends now: long enough to be logged.
    runtime_metrics._started[threading.get_ident()] = time.perf_counter() - 1.0
    runtime_metrics._on_gc("stop", {"generation": 2, "collected": 0})
    assert [(event, fields["frozen_objects"]) for event, fields in logged] == [("gc_pause", frozen)]
    assert not walks


class _Recorder:
    def __init__(self, logged: list[tuple[str, dict[str, object]]]) -> None:
        self.logged = logged

    def warning(self, event: str, **fields: object) -> None:
        self.logged.append((event, fields))
