"""A transactional.id's transaction as its coordinator keeps it (Kafka's TransactionMetadata and
TransactionState, KIP-98), and the transitions between its states:

    Empty ──AddPartitions──▶ Ongoing ──EndTxn(commit)──▶ PrepareCommit ──markers written──▶ CompleteCommit
      ▲                        │  └──EndTxn(abort), timeout──▶ PrepareAbort ──markers written──▶ CompleteAbort
      │                        └──InitProducerId (a new instance)──▶ PrepareEpochFence ──▶ PrepareAbort
      └── InitProducerId, or the next AddPartitions, from CompleteCommit / CompleteAbort / Empty

    Dead: the transactional.id expired (transactional.id.expiration.ms) and its record is deleted.

A change is prepared as a new `TxnMetadata` (`prepare_*`, which check the table), written to
`__transaction_state`, and only then made current (txn_coordinator.py), so what is served and what
the log says cannot differ. PrepareEpochFence is never written: it only marks, in memory, an
ongoing transaction whose producer a newer instance fenced, until its abort is prepared.

KIP-890's epoch bump: each EndTxn moves the producer epoch on by one (the markers carry the new
one), so a late batch of an ended transaction can never join the next one.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Final

from tidelog.common.state_machine import IllegalTransitionError, Transitions

__all__ = [
    "EPOCH_MAX",
    "TRANSITIONS",
    "IllegalTransitionError",
    "TopicPartitionKey",
    "TxnMetadata",
    "TxnState",
]

EPOCH_MAX: Final = 2**15 - 1  # producer epochs are int16; at the last one the coordinator gives a new id
TopicPartitionKey = tuple[str, int]


class TxnState(enum.Enum):
    """By Kafka's names; `code` is the byte Kafka's transaction log stores."""

    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"
    DEAD = "Dead"
    PREPARE_EPOCH_FENCE = "PrepareEpochFence"

    @property
    def code(self) -> int:
        return _CODES[self]

    @classmethod
    def of_code(cls, code: int) -> TxnState:
        return _STATES[code]

    @property
    def completed(self) -> bool:
        return self in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)


_CODES: Final = {state: code for code, state in enumerate(TxnState)}
_STATES: Final = {code: state for state, code in _CODES.items()}

# Kafka's TransactionState.validPreviousStates, written the other way round (and with TV2's
# abort of an empty transaction): each state and where it may go.
TRANSITIONS: Final = Transitions(
    "a transaction",
    {
        TxnState.EMPTY: {TxnState.EMPTY, TxnState.ONGOING, TxnState.PREPARE_ABORT, TxnState.DEAD},
        TxnState.ONGOING: {
            TxnState.ONGOING,
            TxnState.PREPARE_COMMIT,
            TxnState.PREPARE_ABORT,
            TxnState.PREPARE_EPOCH_FENCE,
        },
        TxnState.PREPARE_COMMIT: {TxnState.COMPLETE_COMMIT},
        TxnState.PREPARE_ABORT: {TxnState.COMPLETE_ABORT},
        TxnState.COMPLETE_COMMIT: {TxnState.EMPTY, TxnState.ONGOING, TxnState.PREPARE_ABORT, TxnState.DEAD},
        TxnState.COMPLETE_ABORT: {TxnState.EMPTY, TxnState.ONGOING, TxnState.PREPARE_ABORT, TxnState.DEAD},
        TxnState.DEAD: set(),
        TxnState.PREPARE_EPOCH_FENCE: {TxnState.PREPARE_ABORT},
    },
)


@dataclasses.dataclass(frozen=True, slots=True)
class TxnMetadata:
    """One transactional.id's state, as its latest record in `__transaction_state` holds it."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[TopicPartitionKey]
    start_ms: int  # when the current transaction began (-1: none)
    last_update_ms: int
    # The epoch before the last bump (KIP-890): a retried EndTxn from it is answered, not fenced.
    last_producer_epoch: int = -1
    # Set when the bump reached EPOCH_MAX: the id the producer goes on with (at epoch 0) once the
    # transaction completes (KIP-890's NextProducerId).
    next_producer_id: int = -1

    def _to(self, state: TxnState, **changes: object) -> TxnMetadata:
        TRANSITIONS.check(self.state, state)
        return dataclasses.replace(self, state=state, **changes)  # type: ignore[arg-type]

    def prepare_new_epoch(self, now_ms: int, timeout_ms: int, new_producer_id: int | None) -> TxnMetadata:
        """InitProducerId on a completed transaction: the next epoch, or a new id at the last one."""
        if new_producer_id is not None:
            producer_id, epoch = new_producer_id, 0
        else:
            producer_id, epoch = self.producer_id, self.producer_epoch + 1
        return self._to(
            TxnState.EMPTY,
            producer_id=producer_id,
            producer_epoch=epoch,
            last_producer_epoch=-1,
            timeout_ms=timeout_ms,
            partitions=frozenset(),
            start_ms=-1,
            last_update_ms=now_ms,
        )

    def prepare_add_partitions(self, partitions: frozenset[TopicPartitionKey], now_ms: int) -> TxnMetadata:
        starting = self.state != TxnState.ONGOING
        return self._to(
            TxnState.ONGOING,
            partitions=(frozenset() if starting else self.partitions) | partitions,
            start_ms=now_ms if starting else self.start_ms,
            last_update_ms=now_ms,
        )

    @property
    def needs_new_id(self) -> bool:
        """The next bump reaches the last epoch: the transaction ends with a new producer id."""
        return self.producer_epoch + 1 >= EPOCH_MAX

    def prepare_end(
        self, commit: bool, now_ms: int, next_producer_id: int = -1, *, keep_epoch: bool = False
    ) -> TxnMetadata:
        """EndTxn (or the coordinator's own abort): prepare, with the epoch bumped (KIP-890), and
        the id to go on with when the bump reaches the last epoch (`needs_new_id`). `keep_epoch`:
        a client before KIP-890 (Kafka's EndTxn v0-4) goes on with its epoch, as on Kafka then."""
        assert self.producer_epoch < EPOCH_MAX
        if keep_epoch:
            assert next_producer_id < 0, "no new id without a bump"
            return self._to(
                TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT,
                last_producer_epoch=self.producer_epoch,
                next_producer_id=-1,
                start_ms=self.start_ms if self.start_ms >= 0 else now_ms,
                last_update_ms=now_ms,
            )
        assert (next_producer_id >= 0) == self.needs_new_id, "a new id exactly when the epochs run out"
        return self._to(
            TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT,
            producer_epoch=self.producer_epoch + 1,
            last_producer_epoch=self.producer_epoch,
            next_producer_id=next_producer_id,
            start_ms=self.start_ms if self.start_ms >= 0 else now_ms,
            last_update_ms=now_ms,
        )

    @property
    def producer_after_end(self) -> tuple[int, int]:
        """The (id, epoch) the producer goes on with once this prepared end completes."""
        if self.next_producer_id >= 0:
            return self.next_producer_id, 0
        return self.producer_id, self.producer_epoch

    def prepare_fence(self) -> TxnMetadata:
        """A newer instance of the producer (InitProducerId) or a timeout fences an open
        transaction: it is aborted next, whatever its producer asks."""
        return self._to(TxnState.PREPARE_EPOCH_FENCE)

    def prepare_complete(self, now_ms: int) -> TxnMetadata:
        """Every marker is written: the transaction is over."""
        commit = self.state == TxnState.PREPARE_COMMIT
        producer_id, epoch = self.producer_after_end
        return self._to(
            TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT,
            producer_id=producer_id,
            producer_epoch=epoch,
            last_producer_epoch=self.last_producer_epoch if self.next_producer_id < 0 else -1,
            next_producer_id=-1,
            partitions=frozenset(),
            last_update_ms=now_ms,
        )

    def prepare_dead(self) -> TxnMetadata:
        return self._to(TxnState.DEAD)
