"""A producer batch's states: only the transitions in the table, and final states settle the delivery."""

from __future__ import annotations

import asyncio

import pytest

from tidelog.client.producer_batch import BatchState, ProducerBatch
from tidelog.common.record.compression import CompressionType
from tidelog.common.state_machine import IllegalTransitionError

ALL = list(BatchState)
LEGAL = {
    (BatchState.OPEN, BatchState.READY),
    (BatchState.READY, BatchState.IN_FLIGHT),
    (BatchState.READY, BatchState.FAILED),
    (BatchState.IN_FLIGHT, BatchState.READY),
    (BatchState.IN_FLIGHT, BatchState.ACKNOWLEDGED),
    (BatchState.IN_FLIGHT, BatchState.FAILED),
}


@pytest.mark.parametrize("source", ALL)
@pytest.mark.parametrize("target", ALL)
async def test_only_the_listed_transitions_are_allowed(source: BatchState, target: BatchState) -> None:
    batch = ProducerBatch("t", 0, asyncio.get_running_loop(), serial=1)
    batch.state = source
    if (source, target) in LEGAL:
        batch.move_to(target)
        assert batch.state is target
    else:
        with pytest.raises(IllegalTransitionError, match=f"from {source.value} to {target.value}"):
            batch.move_to(target)
        assert batch.state is source


async def test_an_acknowledged_batch_settles_its_delivery_once() -> None:
    batch = ProducerBatch("t", 0, asyncio.get_running_loop(), serial=1)
    batch.move_to(BatchState.READY)
    batch.move_to(BatchState.IN_FLIGHT)
    batch.acknowledge((42, -1))
    assert batch.done and await batch.future == (42, -1)
    with pytest.raises(IllegalTransitionError):
        batch.fail(RuntimeError("late"))  # a second answer for the same batch is a bug, not a no-op


async def test_a_retry_resends_the_bytes_of_the_first_attempt() -> None:
    batch = ProducerBatch("t", 0, asyncio.get_running_loop(), serial=1)
    batch.values = [b"a", b"b"]
    first = batch.encode(CompressionType.NONE)
    batch.values.append(b"c")  # cannot happen once sent; shows the bytes are not encoded again
    assert batch.encode(CompressionType.NONE) is first
