"""An idempotent producer's identity and per-partition sequences (the idempotence half of Kafka's
TransactionManager, KIP-98 and KIP-360).

A batch takes its sequence when it is first sent and keeps it for every retry, so a leader that
already wrote it answers a repeat with the original offset. Batches with a sequence and no answer
yet are kept per partition in sequence order. A batch that fails for good leaves a gap no later
batch can fill: the producer then bumps its epoch and the partitions' sequences restart at 0.

A transactional producer's epoch is its coordinator's: it never bumps it itself (a failed batch
makes the transaction abortable instead), and takes the one each EndTxn answers (`new_epoch`).
"""

from __future__ import annotations

import collections
from typing import Final

from tidelog.client.client_logging import get_logger
from tidelog.client.producer_batch import ProducerBatch
from tidelog.common.errors import ErrorCode
from tidelog.common.record.batch import NO_PRODUCER_ID, next_sequence

__all__ = ["PRODUCER_EPOCH_MAX", "ProducerSequences"]

log = get_logger(__name__)

PRODUCER_EPOCH_MAX: Final = 2**15 - 1


class ProducerSequences:
    def __init__(self, *, transactional: bool = False) -> None:
        self.transactional = transactional
        self.producer_id = NO_PRODUCER_ID
        self.producer_epoch = 0
        self._next: dict[tuple[str, int], int] = {}
        self._unacked: dict[tuple[str, int], collections.deque[ProducerBatch]] = {}  # sequence order

    @property
    def has_id(self) -> bool:
        return self.producer_id != NO_PRODUCER_ID

    def set_id(self, producer_id: int, producer_epoch: int) -> None:
        self.producer_id, self.producer_epoch = producer_id, producer_epoch

    def new_epoch(self, producer_id: int, producer_epoch: int) -> None:
        """The coordinator's next id and epoch (transactions): every partition restarts at 0."""
        assert not any(self._unacked.values()), "a transaction ends with every batch answered"
        self.producer_id, self.producer_epoch = producer_id, producer_epoch
        self._next.clear()

    def assign(self, batch: ProducerBatch) -> None:
        """Give a batch sent for the first time the partition's next sequence (once: retries keep it)."""
        assert batch.base_sequence < 0, "a batch keeps the sequence of its first attempt"
        key = batch.key
        sequence = self._next.get(key, 0)
        batch.producer_id, batch.producer_epoch, batch.base_sequence = self.producer_id, self.producer_epoch, sequence
        batch.transactional = self.transactional
        self._next[key] = next_sequence(sequence, len(batch.values))
        self._unacked.setdefault(key, collections.deque()).append(batch)

    def forget(self, batch: ProducerBatch) -> bool:
        """Drop an answered batch from its partition's unacknowledged ones; whether it was there."""
        pending = self._unacked.get(batch.key)
        if not pending or batch not in pending:
            return False
        pending.remove(batch)
        if not pending:
            del self._unacked[batch.key]
        return True

    def failed_for_good(self, batch: ProducerBatch, reason: str) -> None:
        """A batch will never be written: if it held a sequence of the current epoch, that sequence is
        now a gap, so start a new epoch with sequences from 0 (KIP-360)."""
        if self.forget(batch) and batch.producer_epoch == self.producer_epoch and not self.transactional:
            self.producer_epoch += 1
            if self.producer_epoch > PRODUCER_EPOCH_MAX:
                self.producer_id, self.producer_epoch = NO_PRODUCER_ID, 0  # a fresh id on the next send
            self._next.clear()
            log.warning("producer_epoch_bumped", producer_id=self.producer_id, epoch=self.producer_epoch, reason=reason)

    def behind_a_retry(self, batch: ProducerBatch, code: int) -> bool:
        """OUT_OF_ORDER_SEQUENCE for a batch whose predecessor is still to be retried: retry it too."""
        if code != ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER:
            return False
        pending = self._unacked.get(batch.key)
        return pending is not None and len(pending) > 0 and pending[0] is not batch

    def unacknowledged(self, key: tuple[str, int]) -> list[ProducerBatch]:
        return list(self._unacked.get(key, ()))
