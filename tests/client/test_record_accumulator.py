"""The accumulator on an injected clock: batches close by size and by linger.ms, keep their order
through retries, and buffer.memory blocks send() up to max.block.ms."""

from __future__ import annotations

import asyncio

import pytest

from tests.fake_clock import FakeClock
from tidelog.client.producer_batch import BatchState
from tidelog.client.record_accumulator import RecordAccumulator
from tidelog.common.errors import RequestTimedOutError
from tidelog.common.record.batch import BATCH_OVERHEAD
from tidelog.common.settings import ProducerSettings


def _accumulator(clock: FakeClock, **overrides: int) -> RecordAccumulator:
    """Settings by their attribute names (`batch_size=...`), over small test defaults."""
    configs = {"batch.size": 1000, "linger.ms": 5, "buffer.memory": 10_000}
    configs.update({name.replace("_", "."): value for name, value in overrides.items()})
    return RecordAccumulator(ProducerSettings.from_configs(configs), clock=clock)


async def test_a_batch_closes_when_full_and_the_next_record_opens_another() -> None:
    accumulator = _accumulator(FakeClock(1000.0), batch_size=BATCH_OVERHEAD + 300)
    batch, index, created = accumulator.append("t", 0, b"x", key=None, headers=None, timestamp=None, size=200)
    assert (index, created, batch.state) == (0, True, BatchState.OPEN)
    same, index, created = accumulator.append("t", 0, b"y", key=b"k", headers=None, timestamp=None, size=200)
    assert same is batch and (index, created) == (1, False)
    assert batch.state is BatchState.READY and not accumulator.is_open("t", 0)
    assert batch.keys == [None, b"k"]  # a key column appears once one record has a key
    following, _, created = accumulator.append("t", 0, b"z", key=None, headers=None, timestamp=None, size=10)
    assert created and following is not batch
    assert accumulator.take_ready() == [batch]


async def test_linger_closes_a_batch_only_once_its_time_has_come() -> None:
    clock = FakeClock(1000.0)
    accumulator = _accumulator(clock, linger_ms=5)
    batch, _, _ = accumulator.append("t", 0, b"x", key=None, headers=None, timestamp=None, size=10)
    assert accumulator.close_expired(everything=False) == pytest.approx(clock.now + 0.005)
    assert batch.state is BatchState.OPEN
    clock.now += 0.005
    assert accumulator.close_expired(everything=False) is None
    assert batch.state is BatchState.READY


async def test_flushing_closes_every_open_batch_at_once() -> None:
    accumulator = _accumulator(FakeClock(1000.0), linger_ms=60_000)
    for partition in range(3):
        accumulator.append("t", partition, b"x", key=None, headers=None, timestamp=None, size=10)
    accumulator.close_expired(everything=True)
    assert [batch.partition for batch in accumulator.take_ready()] == [0, 1, 2]


async def test_batches_taken_retried_and_put_back_keep_their_creation_order() -> None:
    accumulator = _accumulator(FakeClock(1000.0))
    batches = []
    for partition in (0, 0, 1):
        batch = accumulator.new_batch("t", partition)
        accumulator.add_ready(batch)
        batches.append(batch)
    first, second, third = accumulator.take_ready()
    first.move_to(BatchState.IN_FLIGHT)
    accumulator.put_back([third, second])  # not sent this round
    accumulator.requeue(first)  # its request failed retriably
    assert accumulator.take_ready() == batches
    assert first.state is BatchState.READY


async def test_a_full_buffer_blocks_until_memory_is_released_or_max_block_ms() -> None:
    accumulator = _accumulator(FakeClock(1000.0), buffer_memory=1024)
    held, _, _ = accumulator.append("t", 0, b"x", key=None, headers=None, timestamp=None, size=1000)
    await accumulator.reserve(1000, max_block_s=1, drain=lambda: None)
    held.reserved = 1000
    drained: list[bool] = []
    waiting = asyncio.create_task(accumulator.reserve(500, max_block_s=5, drain=lambda: drained.append(True)))
    await asyncio.sleep(0)  # let it find the buffer full (a scheduling step, not a timed wait)
    assert not waiting.done() and drained
    accumulator.release(held)
    await asyncio.wait_for(waiting, 5)
    assert accumulator.buffered == 500
    with pytest.raises(RequestTimedOutError, match=r"max\.block\.ms"):
        await accumulator.reserve(1000, max_block_s=0.01, drain=lambda: None)
