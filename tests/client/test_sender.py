"""The sender's drain on an injected clock, without a cluster: which waiting batches expire, what
waits behind what, where a retry goes."""

from __future__ import annotations

import asyncio

import pytest

from tests.fake_clock import FakeClock
from tidelog.client.cluster_metadata import ClusterMetadata
from tidelog.client.producer_batch import BatchState, ProducerBatch
from tidelog.client.producer_sequences import ProducerSequences
from tidelog.client.record_accumulator import RecordAccumulator
from tidelog.client.sender import Sender
from tidelog.common.errors import ErrorCode, RequestTimedOutError
from tidelog.common.settings import ProducerSettings
from tidelog.v1 import broker_pb2, common_pb2

DELIVERY_TIMEOUT_S = 30.0


def _settings(*, idempotent: bool, max_in_flight: int, buffer_memory: int = 10_000) -> ProducerSettings:
    return ProducerSettings.from_configs(
        {
            "acks": "all",
            "enable.idempotence": idempotent,
            "compression.type": "none",
            "max.request.size": 1 << 20,
            "retries": 10,
            "retry.backoff.ms": 100,
            "delivery.timeout.ms": int(DELIVERY_TIMEOUT_S * 1000),
            "request.timeout.ms": 5000,
            "max.in.flight.requests.per.connection": max_in_flight,
            "batch.size": 1000,
            "linger.ms": 0,
            "buffer.memory": buffer_memory,
        }
    )


class OneLeader:
    """Metadata naming one leader for every partition."""

    def leader_endpoint(self, topic: str, partition: int) -> str:
        return "leader:1"


async def test_while_its_leader_is_busy_only_a_batch_never_sent_expires() -> None:
    clock = FakeClock(50.0)
    settings = _settings(idempotent=True, max_in_flight=1)
    accumulator = RecordAccumulator(settings, clock=clock)
    sequences = ProducerSequences()
    sequences.set_id(7, 0)
    sender = Sender(
        settings,
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
    clock = FakeClock(50.0)
    settings = _settings(idempotent=False, max_in_flight=5, buffer_memory=100_000)
    accumulator = RecordAccumulator(settings, clock=clock)
    broker = HeldBroker()
    sender = Sender(
        settings,
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


class _MovedLeader:
    """Brokers 1 and 2 after partition t-0's leadership moved from 1 to 2 (a controlled shutdown):
    broker 1 answers NOT_LEADER_OR_FOLLOWER naming broker 2 in `hint_epoch`, broker 2 takes the
    batch, and either one answers Metadata as broker 1 still sees it (leader 1, epoch 5)."""

    def __init__(self, hint_epoch: int) -> None:
        self.hint_epoch = hint_epoch
        self.produced_to: list[str] = []
        self.metadata_asked = 0

    def broker(self, endpoint: str) -> _MovedLeaderStub:
        return _MovedLeaderStub(self, endpoint)


class _MovedLeaderStub:
    def __init__(self, cluster: _MovedLeader, endpoint: str) -> None:
        self.cluster = cluster
        self.endpoint = endpoint

    async def Produce(self, request: broker_pb2.ProduceRequest, timeout: float) -> broker_pb2.ProduceResponse:  # noqa: N802
        self.cluster.produced_to.append(self.endpoint)
        entry = request.partitions[0]
        result = broker_pb2.ProducePartitionResult(topic=entry.topic, partition=entry.partition, base_offset=40)
        if self.endpoint == "broker:1":
            result.error_code = int(ErrorCode.NOT_LEADER_OR_FOLLOWER)
            result.leader_hint, result.leader_hint_epoch = 2, self.cluster.hint_epoch
        return broker_pb2.ProduceResponse(partitions=[result])

    async def Metadata(self, request: broker_pb2.MetadataRequest, timeout: float) -> broker_pb2.MetadataResponse:  # noqa: N802
        self.cluster.metadata_asked += 1
        return _metadata_response(leader=1, leader_epoch=5)


def _metadata_response(leader: int, leader_epoch: int) -> broker_pb2.MetadataResponse:
    response = broker_pb2.MetadataResponse(
        brokers=[common_pb2.BrokerEndpoint(broker_id=b, host="broker", port=b) for b in (1, 2)]
    )
    response.topics.add(name="t").partitions.add(
        topic="t", partition=0, leader=leader, leader_epoch=leader_epoch, topic_id="id-1"
    )
    return response


@pytest.mark.parametrize("hint_epoch", [6, 5])
async def test_a_not_leader_answer_naming_a_newer_leader_sends_the_batch_there_at_once(hint_epoch: int) -> None:
    # KIP-951: an old leader's NOT_LEADER_OR_FOLLOWER names the new leader and its epoch; a newer
    # epoch than ours is taken at once (no backoff, no metadata round trip), an older or equal one
    # is not (that broker is no wiser than we are): backoff and a refresh, as any retriable error.
    clock = FakeClock(50.0)
    cluster = _MovedLeader(hint_epoch)
    metadata = ClusterMetadata(["broker:1"], cluster)  # type: ignore[arg-type]
    await metadata.refresh(["t"])
    accumulator = RecordAccumulator(_settings(idempotent=False, max_in_flight=1), clock=clock)
    sender = Sender(
        _settings(idempotent=False, max_in_flight=1),
        accumulator,
        ProducerSequences(),
        metadata=metadata,
        connections=cluster,  # type: ignore[arg-type]
        topics=lambda: ["t"],
        clock=clock,
    )
    batch = accumulator.new_batch("t", 0)
    batch.values.append(b"v")
    accumulator.add_ready(batch)
    await sender._drain()
    await asyncio.gather(*sender.requests())
    assert batch.state is BatchState.READY and batch.attempts == 1 and sender.retries == 1
    if hint_epoch == 6:
        assert batch.next_attempt_at == clock.now and cluster.metadata_asked == 1  # only the first refresh
        assert (metadata.partitions["t"][0].leader, metadata.partitions["t"][0].leader_epoch) == (2, 6)
        await metadata.refresh(["t"])  # a broker behind us answers: our newer epoch stays
        assert metadata.leader_endpoint("t", 0) == "broker:2"
        await sender._drain()
        await asyncio.gather(*sender.requests())
        assert cluster.produced_to == ["broker:1", "broker:2"]
        assert batch.state is BatchState.ACKNOWLEDGED and batch.future.result()[0] == 40
    else:
        assert batch.next_attempt_at == clock.now + 0.1 and cluster.metadata_asked == 2  # backoff, refresh
        assert metadata.leader_endpoint("t", 0) == "broker:1"
        batch.future.cancel()
