"""Idempotence state: sequences per partition, kept for retries, a new epoch after a gap (KIP-360)."""

from __future__ import annotations

import asyncio

from tidelog.client.producer_batch import ProducerBatch
from tidelog.client.producer_sequences import PRODUCER_EPOCH_MAX, ProducerSequences
from tidelog.common.errors import ErrorCode
from tidelog.common.record.batch import NO_PRODUCER_ID


def _batch(partition: int, records: int, serial: int) -> ProducerBatch:
    batch = ProducerBatch("t", partition, asyncio.get_running_loop(), serial)
    batch.values = [b"v"] * records
    return batch


async def test_each_partition_numbers_its_batches_from_zero_by_record_count() -> None:
    sequences = ProducerSequences()
    sequences.set_id(7, 0)
    a, b, c = _batch(0, 3, 1), _batch(0, 2, 2), _batch(1, 5, 3)
    for batch in (a, b, c):
        sequences.assign(batch)
    assert [(x.producer_id, x.producer_epoch, x.base_sequence) for x in (a, b, c)] == [(7, 0, 0), (7, 0, 3), (7, 0, 0)]
    assert sequences.unacknowledged(("t", 0)) == [a, b]


async def test_a_batch_behind_a_failed_one_is_retried_not_failed() -> None:
    sequences = ProducerSequences()
    sequences.set_id(7, 0)
    a, b = _batch(0, 1, 1), _batch(0, 1, 2)
    sequences.assign(a)
    sequences.assign(b)
    assert sequences.behind_a_retry(b, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
    assert not sequences.behind_a_retry(a, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)  # the first one's is real
    assert not sequences.behind_a_retry(b, ErrorCode.NOT_LEADER_OR_FOLLOWER)
    assert sequences.forget(a) and not sequences.forget(a)
    assert not sequences.behind_a_retry(b, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)


async def test_a_gap_bumps_the_epoch_and_restarts_sequences_and_an_old_batch_does_not() -> None:
    sequences = ProducerSequences()
    sequences.set_id(7, 3)
    lost, old = _batch(0, 2, 1), _batch(1, 1, 2)
    sequences.assign(lost)
    sequences.assign(old)
    sequences.failed_for_good(lost, "delivery timeout")
    assert (sequences.producer_id, sequences.producer_epoch) == (7, 4)
    fresh = _batch(0, 1, 3)
    sequences.assign(fresh)
    assert (fresh.producer_epoch, fresh.base_sequence) == (4, 0)
    sequences.failed_for_good(old, "an epoch-3 batch failing later")  # its gap is gone with its epoch
    assert sequences.producer_epoch == 4
    never_sent = _batch(0, 1, 4)
    sequences.failed_for_good(never_sent, "no sequence, no gap")
    assert sequences.producer_epoch == 4


async def test_the_last_epoch_asks_for_a_new_producer_id() -> None:
    sequences = ProducerSequences()
    sequences.set_id(7, PRODUCER_EPOCH_MAX)
    batch = _batch(0, 1, 1)
    sequences.assign(batch)
    sequences.failed_for_good(batch, "gap")
    assert (sequences.producer_id, sequences.producer_epoch, sequences.has_id) == (NO_PRODUCER_ID, 0, False)
