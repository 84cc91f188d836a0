"""The consumer's own bookkeeping, without a cluster: positions across assign, pause and seek;
fetch results applied to positions; the offsets a commit stores."""

from __future__ import annotations

import asyncio

import pytest

from tidelog.client import Consumer, TopicPartition
from tidelog.client.consumer import StoredPartition
from tidelog.common.errors import CorruptRecordError, ErrorCode
from tidelog.common.record.batch import encode_batch
from tidelog.v1 import broker_pb2

A, B, C = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("u", 0)


async def test_assign_keeps_the_positions_of_partitions_still_assigned() -> None:
    consumer = Consumer(["127.0.0.1:9"])
    consumer.assign([A, B])
    consumer.seek(A, 10)
    consumer.pause([B, C])  # C is not assigned: pausing it is a no-op
    assert consumer.paused() == {B}
    consumer.assign([A, C])
    assert consumer.assignment() == {A, C}
    assert consumer._positions == {A: 10, C: None}  # B's pause and position went with it
    assert consumer.paused() == set()
    with pytest.raises(ValueError, match="not assigned"):
        consumer.seek(B, 0)
    with pytest.raises(ValueError, match="not negative"):
        consumer.seek(A, -1)
    await consumer.close()


async def test_a_fetch_result_moves_the_position_past_its_last_batch_and_records_the_hw() -> None:
    consumer = Consumer(["127.0.0.1:9"])
    consumer.assign([A])
    consumer.seek(A, 3)
    data = encode_batch([b"a", b"b"], base_offset=2) + encode_batch([b"c"], base_offset=4)
    fetched: dict[TopicPartition, StoredPartition] = {}
    result = broker_pb2.FetchPartitionResult(high_watermark=9, record_batches=data)
    assert consumer._handle_result(A, result, fetched) is False
    assert consumer._positions[A] == 5 and consumer.high_watermarks[A] == 9
    assert fetched[A] == StoredPartition(3, data)  # record 2 was consumed before: poll() skips it
    # Out of range: the position is reset by auto.offset.reset at the next poll; other errors refresh.
    out_of_range = broker_pb2.FetchPartitionResult(error_code=ErrorCode.OFFSET_OUT_OF_RANGE)
    assert consumer._handle_result(A, out_of_range, {}) is False and consumer._positions[A] is None
    not_leader = broker_pb2.FetchPartitionResult(error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER)
    assert consumer._handle_result(A, not_leader, {}) is True
    await consumer.close()


async def test_a_corrupt_batch_raises_before_the_position_moves_past_it() -> None:
    consumer = Consumer(["127.0.0.1:9"])
    consumer.assign([A])
    consumer.seek(A, 2)
    good, bad = encode_batch([b"a", b"b"], base_offset=2), bytearray(encode_batch([b"c"], base_offset=4))
    bad[-1] ^= 0xFF  # a flipped bit in the last record: the CRC no longer matches
    result = broker_pb2.FetchPartitionResult(high_watermark=9, record_batches=good + bytes(bad))
    fetched: dict[TopicPartition, StoredPartition] = {}
    with pytest.raises(CorruptRecordError, match="CRC"):
        consumer._handle_result(A, result, fetched)
    assert consumer._positions[A] == 2 and fetched == {}  # asked again from where it was
    await consumer.close()


async def test_a_fetch_discarded_while_a_poll_waits_on_it_is_dropped_quietly() -> None:
    """A group member's rebalance assigns anew while its poll waits on a fetch: the poll returns
    nothing (it raised KeyError for the discarded fetch, ending a group-chaos worker in a
    three-worker suite run)."""
    consumer = Consumer(["127.0.0.1:9"])
    consumer.assign([A])
    consumer.seek(A, 0)
    waiting = asyncio.Event()

    async def never_answers() -> None:
        waiting.set()
        await asyncio.Event().wait()

    async def start_fetches(max_wait_ms: int) -> None:
        if not consumer._in_flight:
            consumer._in_flight[asyncio.create_task(never_answers())] = [A]

    consumer._start_fetches = start_fetches  # type: ignore[method-assign]
    poll = asyncio.create_task(consumer._fetch_once(5000))
    await waiting.wait()
    consumer.assign([B])  # cancels and forgets the fetch the poll waits on
    assert await asyncio.wait_for(poll, 2) == {}
    await consumer.close()
