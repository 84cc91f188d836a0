from __future__ import annotations

from pathlib import Path

import pytest

from tidelog.broker.storage.leader_epoch_cache import UNDEFINED_EPOCH, LeaderEpochCache


def test_end_offset_for_epoch_is_the_start_of_the_next(tmp_path: Path) -> None:
    cache = LeaderEpochCache(tmp_path / "leader-epoch-checkpoint")
    cache.assign(1, 0)
    cache.assign(1, 50)  # same epoch again: ignored
    cache.assign(3, 100)
    cache.assign(7, 250)
    assert cache.entries() == [(1, 0), (3, 100), (7, 250)]
    assert cache.end_offset_for(1, log_end_offset=300) == (1, 100)
    assert cache.end_offset_for(2, log_end_offset=300) == (1, 100)  # unknown epoch: the one below
    assert cache.end_offset_for(7, log_end_offset=300) == (7, 300)
    assert cache.end_offset_for(9, log_end_offset=300) == (7, 300)
    assert cache.end_offset_for(0, log_end_offset=300) == (UNDEFINED_EPOCH, -1)


def test_epochs_never_go_back(tmp_path: Path) -> None:
    cache = LeaderEpochCache(tmp_path / "leader-epoch-checkpoint")
    cache.assign(5, 10)
    with pytest.raises(AssertionError, match="went back"):
        cache.assign(4, 20)
    with pytest.raises(AssertionError, match="start went back"):
        cache.assign(6, 5)


def test_truncation_from_both_ends_and_persistence(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    cache = LeaderEpochCache(path)
    for epoch, start in [(1, 0), (2, 10), (3, 20), (4, 30)]:
        cache.assign(epoch, start)
    cache.truncate_from_end(25)
    assert cache.entries() == [(1, 0), (2, 10), (3, 20)]
    cache.truncate_from_start(15)
    assert cache.entries() == [(2, 15), (3, 20)]
    cache.flush()
    assert LeaderEpochCache.load(path).entries() == [(2, 15), (3, 20)]
    path.write_text("0\n2\n3 20\n2 15\n")  # epochs out of order: distrusted, dropped
    assert LeaderEpochCache.load(path).entries() == []
