"""The transactional producer's side (client/transaction_manager.py) against a scripted coordinator."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tidelog.client.cluster_metadata import ClusterMetadata
from tidelog.client.connections import Connections
from tidelog.client.producer_sequences import ProducerSequences
from tidelog.client.transaction_manager import StaleTransactionError, TransactionManager, TxnClientState
from tidelog.common.errors import ErrorCode, ProducerFencedError
from tidelog.common.state_machine import IllegalTransitionError
from tidelog.v1 import transaction_pb2


class ScriptedLink:
    """Answers each call with the next of `answers`; `during(call_number)` runs before answering."""

    def __init__(self, answers: list[Any], during: Callable[[int], None] = lambda _: None) -> None:
        self.answers = answers
        self.during = during
        self.calls: list[tuple[str, Any]] = []

    async def call(self, method: str, request: Any) -> Any:
        self.calls.append((method, request))
        self.during(len(self.calls))
        return self.answers.pop(0)


def _manager(link: ScriptedLink) -> TransactionManager:
    sequences = ProducerSequences(transactional=True)
    manager = TransactionManager(
        "tx",
        60_000,
        sequences,
        ClusterMetadata(["127.0.0.1:1"], Connections()),
        Connections(),
        request_timeout_s=1,
        retry_backoff_s=0.001,
        max_block_s=5,
    )
    manager.link = link  # type: ignore[assignment]
    return manager


def _add(code: int = 0) -> transaction_pb2.AddPartitionsToTxnResponse:
    return transaction_pb2.AddPartitionsToTxnResponse(error_code=code)


async def test_the_senders_add_partitions_outlived_by_an_abort_is_given_up_not_fatal() -> None:
    """Found by the full suite: an abort ended the transaction while the sender's AddPartitionsToTxn
    was being retried (CONCURRENT_TRANSACTIONS); its retry, of the old epoch, got PRODUCER_FENCED and
    the producer was declared fenced."""
    manager: TransactionManager

    def the_abort_completes(call: int) -> None:
        if call == 2:
            manager.sequences.new_epoch(7, 2)  # EndTxn(abort) answered the next epoch meanwhile

    link = ScriptedLink(
        [_add(ErrorCode.CONCURRENT_TRANSACTIONS), _add(ErrorCode.PRODUCER_FENCED)], during=the_abort_completes
    )
    manager = _manager(link)
    manager.sequences.new_epoch(7, 1)
    for state in (TxnClientState.INITIALIZING, TxnClientState.READY, TxnClientState.IN_TRANSACTION):
        manager._move(state)
    with pytest.raises(StaleTransactionError):
        await manager.add_partitions({("t", 0)})
    assert manager.state is TxnClientState.IN_TRANSACTION and manager.partitions == set()


async def test_a_fenced_producer_can_only_be_closed() -> None:
    link = ScriptedLink([_add(ErrorCode.PRODUCER_FENCED)])
    manager = _manager(link)
    manager.sequences.new_epoch(7, 1)
    for state in (TxnClientState.INITIALIZING, TxnClientState.READY, TxnClientState.IN_TRANSACTION):
        manager._move(state)
    with pytest.raises(ProducerFencedError):
        await manager.add_partitions({("t", 0)})
    assert manager.state is TxnClientState.FATAL_ERROR
    with pytest.raises(ProducerFencedError):
        manager.begin()
    with pytest.raises(IllegalTransitionError):
        manager._move(TxnClientState.READY)
