"""Transactions for the `__transaction_state` partitions this instance owns (Kafka's
TransactionCoordinator, KIP-98 with KIP-890's defences).

Every change takes the shape "handle request → (response, record)": the handler checks the request
against the transactional.id's `TxnMetadata` (txn_state.py) and prepares the next one, the record
is written to the id's partition (txn_records.py), and only then is it current and the request
answered. One change per transactional.id is in flight at a time; a request meeting one gets
CONCURRENT_TRANSACTIONS, which producers retry. Writes run to the end even if their caller goes.

Ending a transaction is two phases, as Kafka's: EndTxn writes PrepareCommit or PrepareAbort (with
the producer epoch bumped) and is answered; the markers then go to every partition
(txn_marker_writer.py), and CompleteCommit or CompleteAbort is written once all hold theirs. A
coordinator that loads a partition finishes every prepared transaction it finds; an ongoing one
past `transaction.timeout.ms` is fenced and aborted by `tick`, and so is the ongoing transaction of
a producer whose newer instance calls InitProducerId.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Collection, Iterable
from typing import Any, Final, Protocol

import structlog

from tidelog.common.clock import wall_clock_ms
from tidelog.common.errors import ErrorCode, RemoteError, TidelogError
from tidelog.common.settings import CoordinatorSettings
from tidelog.coordinator.txn_marker_writer import TxnMarkersFencedError
from tidelog.coordinator.txn_records import decode_txn_key, decode_txn_value, txn_key, txn_value
from tidelog.coordinator.txn_state import TopicPartitionKey, TxnMetadata, TxnState
from tidelog.server_common.metadata import offsets_partition_for
from tidelog.server_common.to_the_end import ToTheEnd

__all__ = ["TRANSACTIONAL_ID_BYTES_MAX", "TRANSACTION_PARTITIONS_MAX", "TxnCoordinator"]

log = structlog.get_logger(__name__)

TRANSACTIONAL_ID_BYTES_MAX: Final = 1024
TRANSACTION_PARTITIONS_MAX: Final = 10_000  # partitions one transaction may write
SETTLE_WAIT_S: Final = 2.0  # the longest a request waits for the id's transaction end under way


class StateWriter(Protocol):
    async def append(self, partition: int, records: list[tuple[bytes, bytes | None]]) -> None: ...


class MarkerWriter(Protocol):
    async def write(
        self,
        producer_id: int,
        producer_epoch: int,
        *,
        commit: bool,
        coordinator_epoch: int,
        partitions: Iterable[TopicPartitionKey],
    ) -> None: ...


def _error(code: ErrorCode, message: str) -> RemoteError:
    return RemoteError(code, message)


class TxnCoordinator:
    def __init__(
        self,
        writer: StateWriter,
        markers: MarkerWriter,
        config: CoordinatorSettings,
        *,
        new_producer_id: Callable[[], Awaitable[int]],
        clock_ms: Callable[[], int] = wall_clock_ms,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.writer = writer
        self.markers = markers
        self.config = config
        self.new_producer_id = new_producer_id
        self.clock_ms = clock_ms  # wall time: what the records hold, timeouts and expiration
        self.monotonic = monotonic  # the cleanup interval
        self.transactions: dict[int, dict[str, TxnMetadata]] = {}  # owned, loaded partitions → their ids
        self.loading: set[int] = set()
        self.coordinator_epochs: dict[int, int] = {}  # the claim epoch of each owned partition
        self.pending: set[str] = set()  # ids with a change in flight
        self.completions: dict[str, asyncio.Task[None]] = {}  # marker phases under way
        # AddPartitionsToTxn of the next transaction waiting for a completion under way: written in
        # the completion's own append (one replicated write, not two in a row).
        self.joining: dict[str, _Join] = {}
        self.writes = ToTheEnd(lambda error: log.info("txn_background_change_failed", error=repr(error)))
        self._next_cleanup = monotonic()
        self.completed = 0  # transactions ended here (metrics)
        self.settle_wait_s = SETTLE_WAIT_S

    # ---- ownership -------------------------------------------------------------------------

    def partition_of(self, transactional_id: str) -> int:
        return offsets_partition_for(transactional_id, self.config.transaction_state_log_num_partitions)

    def begin_loading(self, partition: int, epoch: int) -> None:
        self.loading.add(partition)
        self.transactions[partition] = {}
        self.coordinator_epochs[partition] = epoch

    def replay(self, partition: int, key: bytes, value: bytes | None) -> None:
        """Apply one record of the partition, in log order: the latest per id wins."""
        transactional_id = decode_txn_key(key)
        transactions = self.transactions.setdefault(partition, {})
        if value is None:
            transactions.pop(transactional_id, None)
        else:
            transactions[transactional_id] = decode_txn_value(transactional_id, value)

    def finish_loading(self, partition: int) -> None:
        """Serve the partition, and finish the transactions its last owner left prepared."""
        self.loading.discard(partition)
        transactions = self.transactions.get(partition, {})
        for transactional_id, metadata in transactions.items():
            if metadata.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                self._start_completion(partition, transactional_id)
        log.info("txn_partition_loaded", partition=partition, transactions=len(transactions))

    def unload(self, partition: int) -> None:
        self.loading.discard(partition)
        for transactional_id in self.transactions.pop(partition, {}):
            task = self.completions.pop(transactional_id, None)
            if task is not None:
                task.cancel()
        self.coordinator_epochs.pop(partition, None)
        log.info("txn_partition_unloaded", partition=partition)

    async def _settled(self, transactional_id: str) -> None:
        """Wait, a bounded while, for the id's transaction end under way (its markers and
        completion) rather than answer CONCURRENT_TRANSACTIONS at once: the producer's next
        transaction starts as soon as the last one is complete, not a retry backoff later."""
        task = self.completions.get(transactional_id)
        if task is not None and not task.done():
            await asyncio.wait({task}, timeout=self.settle_wait_s)

    def _lookup(self, transactional_id: str) -> tuple[int, dict[str, TxnMetadata]]:
        """The id's partition and its transactions, for a change: not while another is in flight."""
        if not transactional_id or len(transactional_id.encode()) > TRANSACTIONAL_ID_BYTES_MAX:
            raise _error(ErrorCode.INVALID_REQUEST, f"a transactional.id is 1 to {TRANSACTIONAL_ID_BYTES_MAX} bytes")
        partition, transactions = self._served(transactional_id)
        if transactional_id in self.pending:
            raise _error(ErrorCode.CONCURRENT_TRANSACTIONS, f"{transactional_id!r} is changing: retry")
        return partition, transactions

    def _served(self, transactional_id: str) -> tuple[int, dict[str, TxnMetadata]]:
        """The id's partition and its transactions, if this instance serves it loaded."""
        partition = self.partition_of(transactional_id)
        if partition in self.loading:
            raise _error(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, f"loading __transaction_state-{partition}")
        transactions = self.transactions.get(partition)
        if transactions is None:
            raise _error(ErrorCode.NOT_COORDINATOR, f"this instance does not serve __transaction_state-{partition}")
        return partition, transactions

    async def _write(self, partition: int, metadata: TxnMetadata) -> None:
        """Write the id's next state and make it current; the id is busy until then."""
        transactional_id = metadata.transactional_id
        self.pending.add(transactional_id)
        try:
            await self.writes.run(self._write_and_apply(partition, metadata))
        finally:
            self.pending.discard(transactional_id)

    async def _write_and_apply(self, partition: int, metadata: TxnMetadata, *after: TxnMetadata) -> None:
        """Write the id's next state (and any `after` it, in the same append) and make the last current."""
        states = [metadata, *after]
        assert all(state.transactional_id == metadata.transactional_id for state in states)
        records = [
            (txn_key(state.transactional_id), None if state.state == TxnState.DEAD else txn_value(state))
            for state in states
        ]
        await self.writer.append(partition, records)
        transactions = self.transactions.get(partition)
        if transactions is None:
            raise _error(ErrorCode.NOT_COORDINATOR, f"__transaction_state-{partition} moved to another coordinator")
        if records[-1][1] is None:
            transactions.pop(metadata.transactional_id, None)
        else:
            transactions[metadata.transactional_id] = states[-1]

    # ---- InitProducerId ----------------------------------------------------------------------

    async def init_producer_id(self, transactional_id: str, timeout_ms: int) -> tuple[int, int]:
        """The producer's id and its next epoch: a new instance fences every older one."""
        if not 1 <= timeout_ms <= self.config.transaction_max_timeout_ms:
            raise _error(
                ErrorCode.INVALID_TRANSACTION_TIMEOUT,
                f"transaction.timeout.ms {timeout_ms} is outside 1..{self.config.transaction_max_timeout_ms} "
                "(transaction.max.timeout.ms)",
            )
        await self._settled(transactional_id)
        partition, transactions = self._lookup(transactional_id)
        current = transactions.get(transactional_id)
        now = self.clock_ms()
        if current is None:
            producer_id = await self.new_producer_id()
            partition, transactions = self._lookup(transactional_id)  # (it may have moved meanwhile)
            if transactional_id in transactions:
                raise _error(ErrorCode.CONCURRENT_TRANSACTIONS, f"{transactional_id!r} was just initialised")
            new = TxnMetadata(transactional_id, producer_id, 0, timeout_ms, TxnState.EMPTY, frozenset(), -1, now)
        elif current.state == TxnState.ONGOING:
            # An older instance's transaction is open: abort it; the caller retries meanwhile.
            self.writes.in_background(self._abort(partition, current))
            raise _error(ErrorCode.CONCURRENT_TRANSACTIONS, f"aborting the open transaction of {transactional_id!r}")
        elif not current.state.completed:
            raise _error(ErrorCode.CONCURRENT_TRANSACTIONS, f"{transactional_id!r} is ending a transaction")
        else:
            next_id = await self.new_producer_id() if current.needs_new_id else None
            new = current.prepare_new_epoch(now, timeout_ms, next_id)
        await self._write(partition, new)
        return new.producer_id, new.producer_epoch

    # ---- AddPartitionsToTxn, AddOffsetsToTxn, verification ---------------------------------

    def _producer(
        self, transactions: dict[str, TxnMetadata], transactional_id: str, pid: int, epoch: int
    ) -> TxnMetadata:
        current = transactions.get(transactional_id)
        if current is None:
            raise _error(ErrorCode.INVALID_PRODUCER_ID_MAPPING, f"{transactional_id!r} has no producer id: init first")
        if pid != current.producer_id:
            if pid == current.next_producer_id:
                raise _error(ErrorCode.CONCURRENT_TRANSACTIONS, f"{transactional_id!r} is ending a transaction")
            raise _error(
                ErrorCode.INVALID_PRODUCER_ID_MAPPING,
                f"{transactional_id!r} has producer id {current.producer_id}, not {pid}",
            )
        if epoch < current.producer_epoch or current.state == TxnState.PREPARE_EPOCH_FENCE:
            raise _error(
                ErrorCode.PRODUCER_FENCED, f"{transactional_id!r}: producer epoch {epoch} was fenced by a newer one"
            )
        if epoch > current.producer_epoch:
            raise _error(
                ErrorCode.INVALID_PRODUCER_EPOCH,
                f"{transactional_id!r}: epoch {epoch} is ahead of {current.producer_epoch}",
            )
        return current

    async def add_partitions(
        self, transactional_id: str, producer_id: int, epoch: int, partitions: Iterable[TopicPartitionKey]
    ) -> None:
        wanted = frozenset(partitions)
        if await self._joined(transactional_id, producer_id, epoch, wanted):
            return
        await self._settled(transactional_id)
        partition, transactions = self._lookup(transactional_id)
        current = self._producer(transactions, transactional_id, producer_id, epoch)
        if current.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            raise _error(ErrorCode.CONCURRENT_TRANSACTIONS, f"{transactional_id!r} is ending a transaction")
        if current.state == TxnState.ONGOING and wanted <= current.partitions:
            return
        _check_partition_count(wanted | current.partitions)
        await self._write(partition, current.prepare_add_partitions(wanted, self.clock_ms()))

    async def _joined(
        self, transactional_id: str, producer_id: int, epoch: int, wanted: frozenset[TopicPartitionKey]
    ) -> bool:
        """Whether the partitions were added in the append of the id's completion under way (the
        producer's next transaction beginning while its last one's markers are written)."""
        task = self.completions.get(transactional_id)
        if task is None or task.done() or transactional_id in self.joining:
            return False
        join = self.joining[transactional_id] = _Join(producer_id, epoch, wanted)
        try:
            either: list[asyncio.Future[Any]] = [join.done, task]
            await asyncio.wait(either, timeout=self.settle_wait_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if self.joining.get(transactional_id) is join:
                del self.joining[transactional_id]
            # Taken but not awaited to its end (timed out, cancelled): its outcome is nobody's.
            join.done.add_done_callback(lambda done: done.cancelled() or done.exception())
        if not join.done.done():
            return False  # not taken: the request goes the usual way
        return join.done.result()  # (raises the error the request met)

    def _join_next(self, completed: TxnMetadata) -> tuple[_Join, TxnMetadata] | None:
        """The AddPartitionsToTxn waiting for `completed` and the next transaction's Ongoing state,
        when the request holds against it; a waiting request that does not hold gets its error."""
        join = self.joining.pop(completed.transactional_id, None)
        if join is None or join.done.done():
            return None
        try:
            current = self._producer(
                {completed.transactional_id: completed}, completed.transactional_id, join.producer_id, join.epoch
            )
            _check_partition_count(join.partitions)  # (the next transaction's first partitions)
        except TidelogError as error:
            join.done.set_exception(error)
            return None
        return join, current.prepare_add_partitions(join.partitions, self.clock_ms())

    async def add_offsets(self, transactional_id: str, producer_id: int, epoch: int, group_id: str) -> int:
        """The group's __consumer_offsets partition joins the transaction (its offsets commit with
        it); returns that partition."""
        offsets_partition = offsets_partition_for(group_id, self.config.offsets_topic_num_partitions)
        await self.add_partitions(transactional_id, producer_id, epoch, [("__consumer_offsets", offsets_partition)])
        return offsets_partition

    def verify(self, transactional_id: str, producer_id: int, epoch: int, partition: TopicPartitionKey) -> None:
        """KIP-890: a broker asks before a transaction's first append to a partition whether the
        transaction is open and holds the partition; raises INVALID_TXN_STATE if not."""
        _, transactions = self._lookup(transactional_id)
        current = self._producer(transactions, transactional_id, producer_id, epoch)
        if current.state != TxnState.ONGOING or partition not in current.partitions:
            raise _error(
                ErrorCode.INVALID_TXN_STATE,
                f"{transactional_id!r} has no open transaction holding {partition[0]}-{partition[1]}",
            )

    # ---- EndTxn ----------------------------------------------------------------------------

    async def end_transaction(
        self, transactional_id: str, producer_id: int, epoch: int, commit: bool, *, keep_epoch: bool = False
    ) -> tuple[int, int]:
        """Commit or abort: answered once the decision is written; returns the producer's next
        (id, epoch), the epoch bumped (KIP-890) unless `keep_epoch` (a client before KIP-890)."""
        partition = self.partition_of(transactional_id)
        known = self.transactions.get(partition, {}).get(transactional_id)
        prepared = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        completed = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        if (
            known is not None
            and producer_id == known.producer_id
            and epoch == known.last_producer_epoch
            and known.state in (prepared, completed)
        ):
            return known.producer_after_end  # a retry of the EndTxn that bumped the epoch
        partition, transactions = self._lookup(transactional_id)
        current = self._producer(transactions, transactional_id, producer_id, epoch)
        if current.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            raise _error(ErrorCode.CONCURRENT_TRANSACTIONS, f"{transactional_id!r} is ending a transaction")
        if current.state != TxnState.ONGOING and commit:
            raise _error(ErrorCode.INVALID_TXN_STATE, f"{transactional_id!r} has no open transaction to commit")
        next_id = await self.new_producer_id() if current.needs_new_id and not keep_epoch else -1
        new = current.prepare_end(commit, self.clock_ms(), next_id, keep_epoch=keep_epoch)
        await self._write(partition, new)
        self._start_completion(partition, transactional_id)
        return new.producer_after_end

    async def _abort(self, partition: int, current: TxnMetadata) -> None:
        """Fence the open transaction's producer and abort it (a newer instance, or its timeout)."""
        transactions = self.transactions.get(partition)
        if transactions is None or transactions.get(current.transactional_id) is not current:
            return  # it changed meanwhile
        if current.transactional_id in self.pending:
            return
        fenced = transactions[current.transactional_id] = current.prepare_fence()
        next_id = await self.new_producer_id() if fenced.needs_new_id else -1
        await self._write(partition, fenced.prepare_end(False, self.clock_ms(), next_id))
        self._start_completion(partition, current.transactional_id)

    def _start_completion(self, partition: int, transactional_id: str) -> None:
        if transactional_id not in self.completions:
            task = asyncio.create_task(self._complete(partition, transactional_id))
            self.completions[transactional_id] = task
            task.add_done_callback(lambda _: self.completions.pop(transactional_id, None))

    async def _complete(self, partition: int, transactional_id: str) -> None:
        """Write the markers, then CompleteCommit / CompleteAbort."""
        try:
            current = self.transactions[partition][transactional_id]
            await self.markers.write(
                current.producer_id,
                current.producer_epoch,
                commit=current.state == TxnState.PREPARE_COMMIT,
                coordinator_epoch=self.coordinator_epochs[partition],
                partitions=current.partitions,
            )
            # An `unload` from here on cancels the wait, not the write and its apply (ToTheEnd).
            completed = current.prepare_complete(self.clock_ms())
            joining = self._join_next(completed)
            if joining is None:
                await self._write(partition, completed)
            else:
                await self._write_joined(partition, completed, *joining)
            self.completed += 1
        except TxnMarkersFencedError as error:
            log.warning("txn_markers_fenced", transactional_id=transactional_id, error=error.message)
        except (TidelogError, KeyError) as error:  # the partition moved: its next owner finishes
            log.info("txn_completion_stopped", transactional_id=transactional_id, error=str(error))

    async def _write_joined(self, partition: int, completed: TxnMetadata, join: _Join, joined: TxnMetadata) -> None:
        """The completion and the next transaction's partitions in one append; the waiting
        AddPartitionsToTxn is answered with the outcome."""
        transactional_id = completed.transactional_id
        self.pending.add(transactional_id)
        try:
            await self.writes.run(self._write_and_apply(partition, completed, joined))
        except BaseException as error:
            if not join.done.done():
                # Cancelled: the partition was unloaded (the write itself runs to its end).
                moved = _error(ErrorCode.NOT_COORDINATOR, f"__transaction_state-{partition} moved")
                join.done.set_exception(error if isinstance(error, TidelogError) else moved)
            raise
        finally:
            self.pending.discard(transactional_id)
        if not join.done.done():
            join.done.set_result(True)

    # ---- admin (KIP-664) ----------------------------------------------------------------------

    def describe(self, transactional_id: str) -> TxnMetadata:
        _, transactions = self._served(transactional_id)
        found = transactions.get(transactional_id)
        if found is None:
            raise _error(ErrorCode.TRANSACTIONAL_ID_NOT_FOUND, f"no transactional.id {transactional_id!r}")
        return found

    def listed(self, states: Collection[str] = (), producer_ids: Collection[int] = ()) -> list[TxnMetadata]:
        """This instance's transactional ids (of loaded partitions), filtered by state and producer id."""
        return [
            metadata
            for partition, transactions in self.transactions.items()
            if partition not in self.loading
            for metadata in transactions.values()
            if (not states or metadata.state.value in states)
            and (not producer_ids or metadata.producer_id in producer_ids)
        ]

    # ---- clocks ----------------------------------------------------------------------------

    async def tick(self) -> None:
        """Abort transactions past their timeout; forget ids idle past their expiration."""
        if self.monotonic() < self._next_cleanup:
            return
        self._next_cleanup = (
            self.monotonic() + self.config.transaction_abort_timed_out_transaction_cleanup_interval_ms / 1000
        )
        now = self.clock_ms()
        for partition, transactions in list(self.transactions.items()):
            if partition in self.loading:
                continue
            for metadata in list(transactions.values()):
                if metadata.transactional_id in self.pending:
                    continue
                if metadata.state == TxnState.ONGOING and now > metadata.start_ms + metadata.timeout_ms:
                    log.info(
                        "txn_timed_out", transactional_id=metadata.transactional_id, timeout_ms=metadata.timeout_ms
                    )
                    self.writes.in_background(self._abort(partition, metadata))
                elif (
                    metadata.state.completed
                    and now - metadata.last_update_ms > self.config.transactional_id_expiration_ms
                ):
                    with contextlib.suppress(TidelogError):
                        await self._write(partition, metadata.prepare_dead())


def _check_partition_count(partitions: Collection[TopicPartitionKey]) -> None:
    if len(partitions) > TRANSACTION_PARTITIONS_MAX:
        raise _error(ErrorCode.INVALID_REQUEST, f"a transaction writes at most {TRANSACTION_PARTITIONS_MAX} partitions")


class _Join:
    """An AddPartitionsToTxn waiting to be written with the completion of the id's last transaction."""

    def __init__(self, producer_id: int, epoch: int, partitions: frozenset[TopicPartitionKey]) -> None:
        self.producer_id = producer_id
        self.epoch = epoch
        self.partitions = partitions
        self.done: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
