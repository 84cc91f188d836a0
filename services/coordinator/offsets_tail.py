"""Following the owned `__consumer_offsets` partitions past their load, for what is written there
by others than this coordinator's handlers: the transaction markers a transaction coordinator
writes, and the transactional offsets of a TxnOffsetCommit (which a deposed owner may still have
written, since they carry the producer's id, not the owner's fenced one). Kafka's group
coordinator learns of markers in-process, from the broker that appends them; here the coordinator
reads its partitions' logs, with one consumer for all of them.

Only control and transactional batches are decoded: the rest is this instance's own commits,
applied when written.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from typing import Final

import structlog

from tidelog.client import Consumer, TopicPartition
from tidelog.client.connections import Connections
from tidelog.common.record.batch import CONTROL_BIT, TRANSACTIONAL_BIT, RecordBatch, decode_batch, iter_headers
from tidelog.server_common.metadata import CONSUMER_OFFSETS_TOPIC

__all__ = ["OffsetsTail"]

log = structlog.get_logger(__name__)

POLL_MS: Final = 500
RETRY_S: Final = 0.5


class OffsetsTail:
    def __init__(
        self, bootstrap: Sequence[str], connections: Connections, apply: Callable[[int, RecordBatch], None]
    ) -> None:
        self.consumer = Consumer(bootstrap, connections=connections, fetch_max_wait_ms=POLL_MS)
        self.consumer.control_batches = True
        self.apply = apply  # (partition, a control or transactional batch), in log order
        self.positions: dict[int, int] = {}
        self.changed = asyncio.Event()

    def follow(self, partition: int, offset: int) -> None:
        """Follow `partition` from `offset` (the first offset its load did not read)."""
        self.positions[partition] = offset
        self._assign()
        self.consumer.seek(TopicPartition(CONSUMER_OFFSETS_TOPIC, partition), offset)

    def forget(self, partition: int) -> None:
        if self.positions.pop(partition, None) is not None:
            self._assign()

    def _assign(self) -> None:
        self.consumer.assign(TopicPartition(CONSUMER_OFFSETS_TOPIC, partition) for partition in self.positions)
        self.changed.set()

    async def run(self) -> None:
        while True:
            if not self.positions:
                self.changed.clear()
                await self.changed.wait()
                continue
            try:
                fetched = await self.consumer.poll_stored(POLL_MS)
            except Exception as error:  # brokers restarting: try again
                log.info("offsets_tail_poll_failed", error=repr(error))
                await asyncio.sleep(RETRY_S)
                continue
            for tp, stored in fetched.items():
                if tp.partition not in self.positions:
                    continue  # forgotten meanwhile
                data = stored.record_batches
                for position, header in iter_headers(data):
                    if header.next_offset <= stored.start_offset:
                        continue
                    if header.attributes & (CONTROL_BIT | TRANSACTIONAL_BIT):
                        self.apply(tp.partition, decode_batch(data, position, verify_crc=False))

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self.consumer.close()
