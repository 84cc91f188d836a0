"""DeleteRecords as Kafka's broker answers it, on a real replica manager and logs, without the
network: the leader moves its log start at once, and the answer waits for the low watermark (every
live replica's log start, as their fetches report it) up to the request's TimeoutMs."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.broker.test_replica_manager import ME, OTHER, THIRD, TOPIC, _apply, _settings
from tidelog.broker.kafka_api.delete_records import delete_records
from tidelog.broker.metadata_cache import MetadataCache
from tidelog.broker.replica_manager import ReplicaManager
from tidelog.common.errors import ErrorCode
from tidelog.common.record.batch import encode_batch
from tidelog.v1 import broker_pb2


class _AllowAll:
    def caller(self, context: object) -> None:
        return None

    def allowed(self, *asked: object) -> bool:
        return True


@pytest.fixture
async def service(tmp_path: Path) -> AsyncIterator[Any]:
    """A leader of TOPIC-0 (replicas ME, OTHER, THIRD; ISR ME alone) holding offsets 0-9, all
    committed; every replica's broker alive."""
    replicas = ReplicaManager(ME, tmp_path, _settings())
    try:
        await _apply(replicas, leader=ME, leader_epoch=1, partition_epoch=1, isr=[ME], extra=[THIRD])
        await replicas.append(TOPIC, 0, encode_batch([b"x"] * 10), acks=-1, timeout_s=10)
        metadata = MetadataCache()
        metadata.incarnations = {ME: "me", OTHER: "life-2", THIRD: "life-3"}
        yield SimpleNamespace(access=_AllowAll(), replicas=replicas, metadata=metadata)
    finally:
        await replicas.close()


def _request(offset: int, timeout_ms: int) -> dict[str, Any]:
    return {
        "Topics": [{"Name": TOPIC, "Partitions": [{"PartitionIndex": 0, "Offset": offset}]}],
        "TimeoutMs": timeout_ms,
    }


def _answer(response: dict[str, Any]) -> tuple[int, int]:
    partition = response["Topics"][0]["Partitions"][0]
    return partition["ErrorCode"], partition["LowWatermark"]


def _fetch(service: Any, replica: int, log_start: int) -> None:
    fetch = broker_pb2.FetchPartition(
        topic=TOPIC, partition=0, fetch_offset=10, current_leader_epoch=1, log_start_offset=log_start
    )
    assert service.replicas.followers.record_fetch(replica, f"life-{replica}", [fetch]) == {}


async def _settled(task: asyncio.Task[Any]) -> bool:
    for _ in range(5):  # (the leader's own move runs on the I/O pool)
        await asyncio.sleep(0.01)
    return task.done()


async def test_the_answer_waits_until_every_live_replica_moved_its_log_start(service: Any) -> None:
    deleting = asyncio.create_task(delete_records(service, _request(6, 10_000), None))  # type: ignore[arg-type]
    assert not await _settled(deleting), "no follower has said where its log starts"
    assert service.replicas.partitions[(TOPIC, 0)].log.log_start_offset == 6  # the leader moved at once
    _fetch(service, OTHER, 6)
    assert not await _settled(deleting), "broker 3 still holds offsets 0-5"
    _fetch(service, THIRD, 4)
    assert not await _settled(deleting), "broker 3 holds offsets 4-5"
    _fetch(service, THIRD, 6)
    assert _answer(await asyncio.wait_for(deleting, 5)) == (ErrorCode.NONE, 6)


async def test_a_replica_on_a_dead_broker_is_not_waited_for(service: Any) -> None:
    del service.metadata.incarnations[THIRD]
    deleting = asyncio.create_task(delete_records(service, _request(6, 10_000), None))  # type: ignore[arg-type]
    assert not await _settled(deleting)
    _fetch(service, OTHER, 7)  # (ahead: a follower's log start may pass the offset asked)
    assert _answer(await asyncio.wait_for(deleting, 5)) == (ErrorCode.NONE, 6)


async def test_a_replica_that_never_moves_times_the_partition_out(service: Any) -> None:
    _fetch(service, OTHER, 0)
    _fetch(service, THIRD, 0)
    answer = _answer(await asyncio.wait_for(delete_records(service, _request(-1, 200), None), 5))  # type: ignore[arg-type]
    assert answer == (ErrorCode.REQUEST_TIMED_OUT, 10)  # (-1: up to the high watermark; the leader's own)


async def test_a_leadership_moving_meanwhile_answers_not_leader(service: Any) -> None:
    deleting = asyncio.create_task(delete_records(service, _request(6, 10_000), None))  # type: ignore[arg-type]
    assert not await _settled(deleting)
    await _apply(service.replicas, leader=OTHER, leader_epoch=2, partition_epoch=2, isr=[OTHER, ME], extra=[THIRD])
    code, _ = _answer(await asyncio.wait_for(deleting, 5))
    assert code == ErrorCode.NOT_LEADER_OR_FOLLOWER
