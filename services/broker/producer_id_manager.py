"""Producer ids for idempotent producers (InitProducerId), claimed from etcd in blocks (KIP-730).

Each broker takes `producer.id.block.size` ids at a time by compare-and-swap on one etcd key
(tidelog.server_common.metadata.PRODUCER_ID_BLOCK_KEY) and hands them out locally, so an id costs an
etcd round trip only once per block and two brokers never give out the same id. Ids of a block
a broker had not used up when it stopped are skipped, never reused.
"""

from __future__ import annotations

import asyncio
from typing import Final

import structlog
from etcd3aio import Etcd3Client
from etcd3aio.kv import KVService

from tidelog.server_common.etcd.compare import compare_mod_revision
from tidelog.server_common.metadata import PRODUCER_ID_BLOCK_KEY, ProducerIdBlockRecord

__all__ = ["ProducerIdManager"]

log = structlog.get_logger(__name__)

CLAIM_ATTEMPTS_MAX: Final = 20  # compare-and-swap retries while other brokers claim blocks too
PRODUCER_ID_MAX: Final = 2**63 - 1


class ProducerIdManager:
    def __init__(self, etcd: Etcd3Client, broker_id: int, *, block_size: int = 1000) -> None:
        assert block_size > 0
        self.etcd = etcd
        self.broker_id = broker_id
        self.block_size = block_size
        self._next = 0
        self._end = 0  # exclusive end of the current block; empty until the first claim
        self._lock = asyncio.Lock()

    async def next_id(self) -> int:
        async with self._lock:
            if self._next >= self._end:
                await self._claim_block()
            producer_id = self._next
            self._next += 1
            assert 0 <= producer_id < self._end
            return producer_id

    async def _claim_block(self) -> None:
        assert self.etcd.kv is not None
        for _ in range(CLAIM_ATTEMPTS_MAX):
            response = await self.etcd.kv.get(PRODUCER_ID_BLOCK_KEY)
            if response.kvs:
                current = ProducerIdBlockRecord.from_json(response.kvs[0].value)
                first_id = current.next_first_id
                compare = compare_mod_revision(PRODUCER_ID_BLOCK_KEY, response.kvs[0].mod_revision)
            else:
                first_id = 0
                compare = KVService.txn_compare_create_revision(PRODUCER_ID_BLOCK_KEY, 0)
            if first_id + self.block_size > PRODUCER_ID_MAX:
                raise RuntimeError("producer ids are exhausted")
            claimed = ProducerIdBlockRecord(self.broker_id, first_id, self.block_size)
            result = await self.etcd.kv.txn(
                compare=[compare], success=[KVService.txn_op_put(PRODUCER_ID_BLOCK_KEY, claimed.to_json())]
            )
            if result.succeeded:
                self._next, self._end = first_id, first_id + self.block_size
                log.info("producer_id_block_claimed", first_id=first_id, size=self.block_size)
                return
        raise RuntimeError(f"could not claim a producer id block in {CLAIM_ATTEMPTS_MAX} attempts")
