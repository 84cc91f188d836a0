"""The broker service's pure parts: which leader a NOT_LEADER_OR_FOLLOWER answer names."""

from __future__ import annotations

from tidelog.broker.metadata_cache import newest_leader
from tidelog.v1 import common_pb2


def _state(leader: int, leader_epoch: int) -> common_pb2.PartitionState:
    return common_pb2.PartitionState(topic="t", partition=0, leader=leader, leader_epoch=leader_epoch)


def test_the_hint_names_the_leader_of_the_newest_epoch_this_broker_knows() -> None:
    # A controlled shutdown: the LeaderAndIsr making this broker a follower (its replica's state)
    # names the new leader before the UpdateMetadata does (the cache still names this broker).
    replica, cache = _state(leader=2, leader_epoch=6), _state(leader=1, leader_epoch=5)
    assert newest_leader(replica, cache) == (2, 6)
    assert newest_leader(cache, replica) == (2, 6)
    # Not a replica of the partition: the cache is all it knows.
    assert newest_leader(None, cache) == (1, 5)
    # An offline partition (leader -1) names no one, not the stale leader of an older epoch, nor
    # does a partition it knows nothing of.
    assert newest_leader(_state(leader=-1, leader_epoch=7), cache) == (-1, -1)
    assert newest_leader(None, None) == (-1, -1)
