"""Leader-epoch truncation (KIP-101/279) on real partition logs, without the network."""

from __future__ import annotations

from pathlib import Path

from tidelog.broker.replica_fetcher import FollowedPartition, ReplicaFetcherManager
from tidelog.broker.storage import LogConfig, PartitionLog
from tidelog.common.record.batch import encode_batch


def _log(tmp_path: Path, name: str) -> PartitionLog:
    return PartitionLog.open(tmp_path / f"{name}-0", LogConfig.from_configs({}))


def _write(partition_log: PartitionLog, epoch: int, values: list[bytes]) -> None:
    partition_log.assign_leader_epoch(epoch)
    partition_log.append_as_leader(encode_batch(values), leader_epoch=epoch)


def _truncate_against(follower: PartitionLog, leader: PartitionLog) -> None:
    epoch, end = leader.end_offset_for_epoch(follower.leader_epochs.latest_epoch)
    ReplicaFetcherManager._truncate_one(FollowedPartition("t", 0, follower, 1, 9), epoch, end)


def test_divergent_tail_is_cut_exactly_where_the_logs_split(tmp_path: Path) -> None:
    # Epoch 1: both have offsets 0-3. The old leader then wrote 4-5 in epoch 1 that never replicated,
    # and the new leader wrote 4-6 in epoch 2. The logs split at 4: that is where the cut must be.
    old_leader, new_leader = _log(tmp_path, "old"), _log(tmp_path, "new")
    for partition_log in (old_leader, new_leader):
        _write(partition_log, 1, [b"a", b"b", b"c", b"d"])
    _write(old_leader, 1, [b"lost-1", b"lost-2"])
    _write(new_leader, 2, [b"e", b"f", b"g"])
    _truncate_against(old_leader, new_leader)
    assert old_leader.log_end_offset == 4
    old_leader.append_as_follower(new_leader.read(4, 1 << 20))
    assert old_leader.log_end_offset == 7
    assert old_leader.leader_epochs.entries() == [(1, 0), (2, 4)]


def test_a_follower_behind_keeps_everything(tmp_path: Path) -> None:
    leader, follower = _log(tmp_path, "leader"), _log(tmp_path, "follower")
    _write(leader, 3, [b"a", b"b"])
    follower.append_as_follower(leader.read(0, 1 << 20))
    _write(leader, 3, [b"c", b"d"])
    _truncate_against(follower, leader)
    assert follower.log_end_offset == 2  # nothing diverged: nothing cut


def test_a_follower_with_an_epoch_the_leader_never_had(tmp_path: Path) -> None:
    # The follower led briefly in epoch 5 (unreplicated writes); the new leader went 4 -> 6.
    leader, follower = _log(tmp_path, "leader"), _log(tmp_path, "follower")
    _write(leader, 4, [b"a", b"b", b"c"])
    follower.append_as_follower(leader.read(0, 1 << 20))
    _write(follower, 5, [b"x", b"y"])
    _write(leader, 6, [b"d"])
    _truncate_against(follower, leader)  # leader answers for epoch 4: it ended at 3
    assert follower.log_end_offset == 3
    assert follower.leader_epochs.entries() == [(4, 0)]
