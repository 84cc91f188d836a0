"""A connection's produce answers kept in step with an idempotent producer's retries.

librdkafka keeps up to five produce requests of a partition in flight. When one is refused for a
passing reason (NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS, ...), it lets the others finish and
then sends again from the refused one, with the same sequence numbers. But when the reason passes
between two of those requests (the replica becomes the leader, the ISR grows back), a later request
reaches the sequence check without the refused one before it: OUT_OF_ORDER_SEQUENCE_NUMBER.
librdkafka reads that as producer and broker out of step. It bumps its producer epoch and sends
everything unacknowledged again from sequence 0, including a batch the leader already holds (the
old leader wrote it and died before answering; the new one copied it). The new epoch cannot be
matched with the old batch: the records are written twice. The librdkafka nemesis found one batch
of 20 records written twice this way. Kafka's broker has the same window.

So, on one connection: after a producer's batch for a partition is refused with a retriable error,
an OUT_OF_ORDER answer to the same producer (id and epoch) for that partition gets the refusal's
error instead. The client then sends it again after the refused one, as it would have if the reason
had not passed. At most `OUT_OF_ORDER_HELD_MAX` answers are changed after a refusal (the client's
in-flight bound), so a client truly out of step still hears OUT_OF_ORDER. An accepted batch ends
the rule.

Answers are settled in the order the requests came: a request's answer waits for the one before it
to be settled (it could not be sent before it anyway).
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any, Final

import structlog

from tidelog.common.errors import RETRIABLE_CODES, ErrorCode

__all__ = ["OUT_OF_ORDER_HELD_MAX", "ProduceSequences"]

log = structlog.get_logger(__name__)

OUT_OF_ORDER_HELD_MAX: Final = 5  # librdkafka's (and Kafka's) in-flight requests of an idempotent producer
PARTITIONS_HELD_MAX: Final = 1024  # refusals a connection remembers; the oldest goes first

Producer = tuple[int, int]  # (producer id, producer epoch)


@dataclasses.dataclass(slots=True)
class _Refusal:
    producer: Producer
    code: int
    left: int  # OUT_OF_ORDER answers that may still be changed


class ProduceSequences:
    """One connection's: the order its produce answers are settled in, and the refusals of each
    partition's last batch."""

    def __init__(self) -> None:
        self._refused: dict[tuple[str, int], _Refusal] = {}
        self._last: asyncio.Event | None = None

    def turn(self) -> tuple[asyncio.Event | None, asyncio.Event]:
        """The settling of the request before this one (None: nothing to wait for), and this one's.
        Called as the request starts, before any await: requests start in order."""
        previous, mine = self._last, asyncio.Event()
        self._last = mine
        return previous, mine

    def settle(self, topic: str, partition: int, producer: Producer | None, answer: dict[str, Any]) -> None:
        """Note one partition's answer, or change it as the module says; `producer`: None for a
        batch without a producer id."""
        if producer is None:
            return
        key = (topic, partition)
        code = answer["ErrorCode"]
        refusal = self._refused.get(key)
        if refusal is not None and refusal.producer != producer:
            del self._refused[key]
            refusal = None
        if code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER and refusal is not None and refusal.left > 0:
            refusal.left -= 1
            log.info(
                "produce_out_of_order_held",
                topic=topic,
                partition=partition,
                producer_id=producer[0],
                producer_epoch=producer[1],
                answered=ErrorCode(refusal.code).name,
                said=answer.get("ErrorMessage"),
            )
            answer["ErrorCode"] = refusal.code
            answer["ErrorMessage"] = (
                f"an earlier batch of producer {producer[0]} for {topic}-{partition} was refused on this "
                f"connection ({ErrorCode(refusal.code).name}): send again after it"
            )
        elif code in RETRIABLE_CODES:
            self._refused.pop(key, None)  # (to the end: the newest)
            self._refused[key] = _Refusal(producer, code, OUT_OF_ORDER_HELD_MAX)
            if len(self._refused) > PARTITIONS_HELD_MAX:
                del self._refused[next(iter(self._refused))]
        else:
            self._refused.pop(key, None)
