"""An idempotent producer's answers on one connection (produce_sequences.py): after a batch is
refused with a retriable error, an OUT_OF_ORDER_SEQUENCE_NUMBER answer to the same producer and
partition becomes that error (librdkafka would bump its epoch on OUT_OF_ORDER and write a batch the
leader already holds a second time), for at most the client's in-flight bound; answers are settled
in request order even when a later request finishes first."""

from __future__ import annotations

import asyncio
import types
from typing import Any

from tests.broker.kafka_api.listening import listening
from tests.kafka_frames import idempotent_batch, produce_frame, read_produce_answer
from tidelog.broker.kafka_api.produce_sequences import OUT_OF_ORDER_HELD_MAX, ProduceSequences
from tidelog.common.errors import ErrorCode
from tidelog.v1 import broker_pb2

OOO = ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def _answer(code: int) -> dict[str, Any]:
    return {"Index": 0, "ErrorCode": int(code), "ErrorMessage": None}


def test_an_out_of_order_answer_after_a_retriable_refusal_becomes_that_refusal() -> None:
    sequences = ProduceSequences()
    producer = (7, 0)
    sequences.settle("t", 0, producer, _answer(ErrorCode.NOT_ENOUGH_REPLICAS))
    changed = _answer(OOO)
    sequences.settle("t", 0, producer, changed)
    assert changed["ErrorCode"] == ErrorCode.NOT_ENOUGH_REPLICAS
    assert "refused on this connection" in changed["ErrorMessage"]
    # Another partition, another producer, a newer epoch: their OUT_OF_ORDER stays.
    for topic, partition, other in (("t", 1, producer), ("t", 0, (8, 0))):
        answer = _answer(OOO)
        sequences.settle(topic, partition, other, answer)
        assert answer["ErrorCode"] == OOO, (topic, partition, other)
    # (the other producer took partition 0's place: the refusal of producer 7 is gone)
    sequences.settle("t", 0, producer, _answer(ErrorCode.NOT_LEADER_OR_FOLLOWER))
    epoch_bumped = _answer(OOO)
    sequences.settle("t", 0, (7, 1), epoch_bumped)
    assert epoch_bumped["ErrorCode"] == OOO


def test_the_change_is_bounded_and_an_accepted_batch_ends_it() -> None:
    sequences = ProduceSequences()
    producer = (7, 0)
    sequences.settle("t", 0, producer, _answer(ErrorCode.NOT_LEADER_OR_FOLLOWER))
    codes = []
    for _ in range(OUT_OF_ORDER_HELD_MAX + 1):
        answer = _answer(OOO)
        sequences.settle("t", 0, producer, answer)
        codes.append(answer["ErrorCode"])
    assert codes == [ErrorCode.NOT_LEADER_OR_FOLLOWER] * OUT_OF_ORDER_HELD_MAX + [OOO]  # truly out of step
    sequences.settle("t", 0, producer, _answer(ErrorCode.NOT_ENOUGH_REPLICAS))
    sequences.settle("t", 0, producer, _answer(ErrorCode.NONE))  # the retry went in
    answer = _answer(OOO)
    sequences.settle("t", 0, producer, answer)
    assert answer["ErrorCode"] == OOO
    # A batch without a producer id is never held.
    sequences.settle("t", 2, None, _answer(ErrorCode.NOT_ENOUGH_REPLICAS))
    plain = _answer(OOO)
    sequences.settle("t", 2, None, plain)
    assert plain["ErrorCode"] == OOO


class _ScriptedBroker:
    """Answers each Produce with the next scripted code; the first answer comes late (after the
    second request has been answered), as an acks=all wait on other partitions would make it."""

    def __init__(self, codes: list[ErrorCode]) -> None:
        self.codes = codes
        self.calls = 0
        self.second_done = asyncio.Event()

    async def Produce(self, request: broker_pb2.ProduceRequest, context: Any, on_appended: Any) -> Any:  # noqa: N802
        call, self.calls = self.calls, self.calls + 1
        on_appended()
        if call == 0:
            await self.second_done.wait()
        elif call == 1:
            self.second_done.set()
        entry = request.partitions[0]
        code = self.codes[call]
        return broker_pb2.ProduceResponse(
            partitions=[
                broker_pb2.ProducePartitionResult(
                    topic=entry.topic,
                    partition=entry.partition,
                    error_code=int(code),
                    base_offset=-1 if code else 100 * call,
                )
            ]
        )


async def _answers(port: int, count: int) -> list[tuple[int, int]]:
    """Send `count` produce requests at once (sequences 0, 10, 20, ...); (correlation id, code) of
    each answer, in the order they came."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(
            b"".join(
                produce_frame(number, "t", 0, idempotent_batch(7, number * 10, count=10)) for number in range(count)
            )
        )
        answers = []
        for _ in range(count):
            correlation_id, answer = await read_produce_answer(reader)
            answers.append((correlation_id, answer["ErrorCode"]))
        return answers
    finally:
        writer.close()


async def test_pipelined_requests_are_settled_in_order_through_the_listener() -> None:
    service = _ScriptedBroker([ErrorCode.NOT_ENOUGH_REPLICAS, OOO, ErrorCode.NONE, OOO])
    async with listening(types.SimpleNamespace(Produce=service.Produce)) as port:
        answers = await asyncio.wait_for(_answers(port, 4), 30)
    assert answers == [
        (0, ErrorCode.NOT_ENOUGH_REPLICAS),
        (1, ErrorCode.NOT_ENOUGH_REPLICAS),  # the second, answered first, still sees the first's refusal
        (2, ErrorCode.NONE),
        (3, OOO),  # after an accepted batch: out of step for real
    ]
