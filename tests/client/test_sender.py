"""The sender's drain on an injected clock, without a cluster: which waiting batches expire."""

from __future__ import annotations

import asyncio

import pytest

from tidelog.client.producer_batch import BatchState, ProducerBatch
from tidelog.client.producer_sequences import ProducerSequences
from tidelog.client.record_accumulator import RecordAccumulator
from tidelog.client.sender import Sender, SenderOptions
from tidelog.common.errors import RequestTimedOutError
from tidelog.common.record.compression import CompressionType
from tidelog.v1 import broker_pb2

DELIVERY_TIMEOUT_S = 30.0


class FakeClock:
    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


def _options(*, idempotent: bool, max_in_flight: int) -> SenderOptions:
    return SenderOptions(
        acks=-1,
        idempotent=idempotent,
        compression=CompressionType.NONE,
        max_request_size=1 << 20,
        retries=10,
        retry_backoff_s=0.1,
        delivery_timeout_s=DELIVERY_TIMEOUT_S,
        request_timeout_s=5,
        max_in_flight=max_in_flight,
    )


class OneLeader:
    """Metadata naming one leader for every partition."""

    def leader_endpoint(self, topic: str, partition: int) -> str:
        return "leader:1"


async def test_while_its_leader_is_busy_only_a_batch_never_sent_expires() -> None:
    clock = FakeClock()
    accumulator = RecordAccumulator(batch_size=1000, linger_s=0, buffer_memory=10_000, clock=clock)
    sequences = ProducerSequences()
    sequences.set_id(7, 0)
    options = _options(idempotent=True, max_in_flight=1)
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
    sender.in_flight["leader:1"] = {busy}  # type: ignore[arg-type]  # a request still out (a frozen leader)
    clock.now += DELIVERY_TIMEOUT_S + 1
    await sender._drain()
    assert never_sent.state is BatchState.FAILED
    with pytest.raises(RequestTimedOutError, match=r"delivery\.timeout\.ms"):
        await never_sent.future
    # It holds a sequence whose outcome is unknown: failing it now would leave a gap that fails every
    # later batch of its partition; it waits for its leader and expires when its retry is scheduled.
    assert sent_before.state is BatchState.READY and sequences.producer_epoch == 0
    busy.cancel()


class HeldBroker:
    """A broker whose Produce answers only when released: records which partitions each request held."""

    def __init__(self) -> None:
        self.requests: list[list[int]] = []
        self.release = asyncio.Event()

    def broker(self, endpoint: str) -> HeldBroker:
        return self

    async def Produce(self, request: broker_pb2.ProduceRequest, timeout: float) -> broker_pb2.ProduceResponse:  # noqa: N802
        self.requests.append([entry.partition for entry in request.partitions])
        await self.release.wait()
        return broker_pb2.ProduceResponse(
            partitions=[
                broker_pb2.ProducePartitionResult(topic=entry.topic, partition=entry.partition, base_offset=0)
                for entry in request.partitions
            ]
        )


async def test_several_requests_to_one_broker_but_never_two_with_one_partition() -> None:
    # max.in.flight.requests.per.connection: a batch of partition 1 need not wait behind a request
    # holding partition 0; a second batch of partition 0 must (order and sequences per partition).
    clock = FakeClock()
    accumulator = RecordAccumulator(batch_size=1000, linger_s=0, buffer_memory=100_000, clock=clock)
    broker = HeldBroker()
    options = _options(idempotent=False, max_in_flight=5)
    sender = Sender(
        options,
        accumulator,
        ProducerSequences(),
        metadata=OneLeader(),  # type: ignore[arg-type]
        connections=broker,  # type: ignore[arg-type]
        topics=list,
        clock=clock,
    )

    def ready(partition: int) -> ProducerBatch:
        batch = accumulator.new_batch("t", partition)
        batch.values.append(b"v")
        accumulator.add_ready(batch)
        return batch

    first = ready(0)
    await sender._drain()
    await asyncio.sleep(0)
    again, other = ready(0), ready(1)
    await sender._drain()
    await asyncio.sleep(0)
    assert broker.requests == [[0], [1]], "partition 1 went at once; partition 0's second batch waits"
    assert len(sender.requests()) == 2
    broker.release.set()
    await asyncio.gather(*sender.requests())
    await sender._drain()
    await asyncio.sleep(0)
    assert broker.requests[-1] == [0], "then partition 0's second batch goes"
    await asyncio.gather(*sender.requests())
    assert {first.state, again.state, other.state} == {BatchState.ACKNOWLEDGED}
