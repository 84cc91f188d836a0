"""A producer batch's states: only the transitions in the table, and final states settle the delivery."""

from __future__ import annotations

import asyncio

import pytest

from tests.waiting import until
from tidelog.client.producer import RecordDelivery
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


async def test_record_callbacks_run_in_the_order_added_once_the_batch_is_acknowledged() -> None:
    loop = asyncio.get_running_loop()
    batch = ProducerBatch("t", 3, loop, serial=1)
    calls: list[tuple[int, int]] = []
    deliveries = [RecordDelivery(batch, index) for index in range(3)]
    for delivery in reversed(deliveries):  # added last record first
        delivery.add_done_callback(lambda d: calls.append((d.result().offset, d.result().partition)))
    for _ in range(3):
        await asyncio.sleep(0)
    assert calls == []  # nothing before the batch settles
    batch.move_to(BatchState.READY)
    batch.move_to(BatchState.IN_FLIGHT)
    batch.acknowledge((100, 7))
    await until(lambda: len(calls) == 3)
    assert calls == [(102, 3), (101, 3), (100, 3)]
    late: list[RecordDelivery] = []
    deliveries[1].add_done_callback(late.append)  # the batch is settled: called soon, as asyncio would
    await until(lambda: len(late) == 1)
    assert late == [deliveries[1]]
    assert batch.callbacks is None and batch.callback_deliveries is None  # nothing kept once called


async def test_a_failing_record_callback_stops_no_other_and_reaches_the_loops_handler() -> None:
    loop = asyncio.get_running_loop()
    reported: list[BaseException] = []
    loop.set_exception_handler(lambda _, context: reported.append(context["exception"]))
    try:
        batch = ProducerBatch("t", 0, loop, serial=1)
        seen: list[BaseException | None] = []

        def broken(_: RecordDelivery) -> None:
            raise ValueError("an application's bug")

        RecordDelivery(batch, 0).add_done_callback(broken)
        RecordDelivery(batch, 1).add_done_callback(lambda d: seen.append(d.exception()))
        batch.move_to(BatchState.READY)
        batch.fail(RuntimeError("timed out"))
        await until(lambda: len(seen) == 1)
        assert isinstance(seen[0], RuntimeError)
        assert [type(error) for error in reported] == [ValueError]
    finally:
        loop.set_exception_handler(None)
