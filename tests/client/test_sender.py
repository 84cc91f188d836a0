"""The sender's drain on an injected clock, without a cluster: which waiting batches expire."""

from __future__ import annotations

import asyncio

import pytest

from tidelog.client.producer_batch import BatchState
from tidelog.client.producer_sequences import ProducerSequences
from tidelog.client.record_accumulator import RecordAccumulator
from tidelog.client.sender import Sender, SenderOptions
from tidelog.common.errors import RequestTimedOutError
from tidelog.common.record.compression import CompressionType

DELIVERY_TIMEOUT_S = 30.0


class FakeClock:
    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


class OneLeader:
    """Metadata naming one leader for every partition."""

    def leader_endpoint(self, topic: str, partition: int) -> str:
        return "leader:1"


async def test_while_its_leader_is_busy_only_a_batch_never_sent_expires() -> None:
    clock = FakeClock()
    accumulator = RecordAccumulator(batch_size=1000, linger_s=0, buffer_memory=10_000, clock=clock)
    sequences = ProducerSequences()
    sequences.set_id(7, 0)
    options = SenderOptions(
        acks=-1,
        idempotent=True,
        compression=CompressionType.NONE,
        max_request_size=1 << 20,
        retries=10,
        retry_backoff_s=0.1,
        delivery_timeout_s=DELIVERY_TIMEOUT_S,
        request_timeout_s=5,
    )
    sender = Sender(
        options,
        accumulator,
        sequences,
        metadata=OneLeader(),  # type: ignore[arg-type]
        connections=None,  # type: ignore[arg-type]
        topics=list,
        clock=clock,
    )
    sent_before = accumulator.new_batch("t", 0)  # went out once, came back for a retry
    accumulator.add_ready(sent_before)
    sequences.assign(sent_before)
    never_sent = accumulator.new_batch("t", 1)
    accumulator.add_ready(never_sent)
    busy = asyncio.get_running_loop().create_future()
    sender.in_flight["leader:1"] = busy  # type: ignore[assignment]  # a request still out (a frozen leader)
    clock.now += DELIVERY_TIMEOUT_S + 1
    await sender._drain()
    assert never_sent.state is BatchState.FAILED
    with pytest.raises(RequestTimedOutError, match=r"delivery\.timeout\.ms"):
        await never_sent.future
    # It holds a sequence whose outcome is unknown: failing it now would leave a gap that fails every
    # later batch of its partition; it waits for its leader and expires when its retry is scheduled.
    assert sent_before.state is BatchState.READY and sequences.producer_epoch == 0
    busy.cancel()
