"""The follower's appends of fetched batches: small ones on the event loop when they are
page-cache writes with the log's lock free, the rest for the I/O threads (ADR 0036)."""

from __future__ import annotations

from pathlib import Path

from tests.broker.storage.conftest import held_by_a_thread, read_all
from tidelog.broker.follower_io import FollowedPartition, append_small_here
from tidelog.broker.storage import LogConfig, PartitionLog
from tidelog.broker.storage_io import INLINE_BYTES_MAX
from tidelog.common.record.batch import encode_batch
from tidelog.v1 import broker_pb2


def _fetched(
    tmp_path: Path, name: str, values: list[bytes]
) -> tuple[FollowedPartition, broker_pb2.FetchPartitionResult]:
    leader = PartitionLog.open(tmp_path / f"leader-{name}-0", LogConfig.from_configs({}))
    leader.append_as_leader(encode_batch(values), leader_epoch=0)
    batches = bytes(leader.read(0, 1 << 30))
    leader.close()
    follower = PartitionLog.open(tmp_path / f"{name}-0", LogConfig.from_configs({}))
    result = broker_pb2.FetchPartitionResult(topic=name, partition=0, record_batches=batches, high_watermark=0)
    return FollowedPartition(name, 0, follower, 1, 0), result


def test_small_appends_are_made_here_and_a_held_log_is_left_for_the_threads(tmp_path: Path) -> None:
    small = _fetched(tmp_path, "small", [b"a", b"b"])
    held = _fetched(tmp_path, "held", [b"c"])
    with held_by_a_thread(held[0].log):
        done, later = append_small_here([small, held])
    assert done == [([small], (1, None))]
    assert later == [held], "a thread holds its log: not waited for here"
    assert [batch.values for batch in read_all(small[0].log)] == [[b"a", b"b"]]
    assert held[0].log.log_end_offset == 0


def test_a_large_fetch_is_all_left_for_the_threads(tmp_path: Path) -> None:
    large = [_fetched(tmp_path, f"large{n}", [bytes(INLINE_BYTES_MAX // 2)]) for n in range(3)]
    done, later = append_small_here(large)
    assert (done, later) == ([], large)
    assert all(followed.log.log_end_offset == 0 for followed, _ in large)
