"""long_lived_heap: what a service's big state changes do to the garbage collector."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from tidelog.server_common import long_lived_heap


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


def test_a_big_change_collects_its_garbage_then_freezes_what_lives() -> None:
    kept = _Node()
    garbage = weakref.ref(_Node())  # dropped at once, but a cycle: still there until a collection
    assert long_lived_heap.settled(long_lived_heap.LONG_LIVED_CHANGE_MIN, reason="test")
    assert garbage() is None  # collected first, never frozen for good
    assert gc.get_freeze_count() > 0
    assert not any(obj is kept for obj in gc.get_objects())  # in no generation a collection walks
    assert kept.me is kept


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
    frozen = gc.get_freeze_count()
    _ = [_Node() for _ in range(10)]  # (garbage made meanwhile)
    watch.moved_to(2 * least, reason="test")  # grown, but not by enough since it settled
    assert gc.get_freeze_count() == frozen
    watch.moved_to(4, reason="test")  # deleted
    assert gc.get_freeze_count() == 0 and watch.at == 4
