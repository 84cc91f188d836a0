"""The exactly-once streaming sink (`exactlyOnce=true`): each micro-batch's output visible once to
read_committed readers, across task retries, driver crashes and restarts from the checkpoint — a
two-phase commit as Flink's KafkaSink does it, on Tidelog's transactions.

Phase one, in each task: a transactional producer of the id `tidelog-spark-<query id>-<task
partition>` (the same for every batch of the query: the ids stay few) fences and aborts whatever
an earlier attempt of it left open (init_transactions), writes the task's rows, commits the
**sink mark** `batch id + 1` for the task's partition as a consumer offset of the group
`tidelog-spark-sink-<query id>` inside the same transaction, and leaves the transaction open
(`prepare_transaction`). The commit message carries the id and the producer's epoch.

Phase two, on the driver, when Spark commits the batch: each task's transaction is resumed and
committed (`resume_transaction`, EndTxn); Spark's abort of the batch aborts them.

Recovery. A driver that dies mid-commit leaves some of the batch's transactions committed and the
rest open; Spark then runs the batch again. A task first reads its sink mark: if it is past the
batch, its transaction committed (the mark commits with the rows, atomically), so it writes nothing.
Else init_transactions aborts the open transaction of the dead run and the task writes again. The
mark is read stable (KIP-447: a commit under way is waited for) unless the task's transaction is
open (Ongoing): that one is the dead run's, it never commits, and the mark before it is the truth.
So every task's rows of every batch are committed exactly once. A batch's tasks commit one by one, not as
one: read_committed readers may see some of a batch's tasks' rows before the others' (as Flink's).

Limits: the transaction stays open from the task's end to the driver's commit, at most
`transaction.timeout.ms` (900,000 ms here unless set: the coordinator's maximum by default), and
read_committed readers of the target wait meanwhile. Speculative execution of tasks is not
supported (a second attempt fences the first). With ACLs the query's principal needs Write on the
`tidelog-spark-*` transactional ids, Read on the group and on the pseudo-topic `__tidelog_spark_sink`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Final

from pyspark.sql.datasource import WriterCommitMessage

from tidelog.client import Producer, TopicPartition
from tidelog.client.coordinator_link import CoordinatorLink
from tidelog.common.errors import ErrorCode, error_for
from tidelog.spark.options import WriteOptions
from tidelog.v1 import coordinator_pb2, transaction_pb2, transaction_pb2_grpc
from tidelog.v1.coordinator_pb2_grpc import CoordinatorStub

__all__ = ["MARK_TOPIC", "PreparedTransaction", "SinkTask", "commit_prepared", "sink_group", "write_prepared"]

MARK_TOPIC: Final = "__tidelog_spark_sink"  # the sink marks' pseudo-topic: never written to, only named
TRANSACTION_TIMEOUT_MS: Final = 900_000


@dataclasses.dataclass
class PreparedTransaction(WriterCommitMessage):
    records: int
    transactional_id: str  # "": nothing to commit (this task's rows of the batch are committed already)
    producer_id: int
    producer_epoch: int


def sink_group(query_id: str) -> str:
    return f"tidelog-spark-sink-{query_id}"


def transactional_id(query_id: str, partition: int) -> str:
    return f"tidelog-spark-{query_id}-{partition}"


def _producer(options: WriteOptions, query_id: str, partition: int) -> Producer:
    client = {"transaction_timeout_ms": TRANSACTION_TIMEOUT_MS, **options.client}
    return Producer(list(options.bootstrap), transactional_id=transactional_id(query_id, partition), **client)


def _link(producer: Producer, group_id: str = "", transactional_id: str = "") -> CoordinatorLink:
    return CoordinatorLink(
        group_id,
        producer.metadata,
        producer.connections,
        request_timeout_s=producer.settings.request_timeout_ms / 1000,
        retry_backoff_s=producer.settings.retry_backoff_ms / 1000,
        transactional_id=transactional_id,
        stub_type=transaction_pb2_grpc.TransactionCoordinatorStub if transactional_id else CoordinatorStub,
    )


async def _sink_mark(producer: Producer, query_id: str, partition: int) -> int:
    """The task's sink mark: one past the last batch whose transaction committed (-1: none)."""
    described = await _link(producer, transactional_id=producer.settings.transactional_id).call(
        "DescribeTransactions",
        transaction_pb2.DescribeTransactionsRequest(transactional_ids=[producer.settings.transactional_id]),
    )
    state = described.transactions[0]
    open_here = state.error_code == ErrorCode.NONE and state.state == "Ongoing"
    request = coordinator_pb2.OffsetFetchRequest(
        group_id=sink_group(query_id),
        partitions=[coordinator_pb2.OffsetCommitPartition(topic=MARK_TOPIC, partition=partition)],
        require_stable=not open_here,
    )
    link = _link(producer, group_id=sink_group(query_id))
    deadline = time.monotonic() + producer.settings.request_timeout_ms / 1000
    while True:
        response = await link.call("OffsetFetch", request)
        if response.error_code:
            raise error_for(response.error_code, response.error_message)
        (entry,) = response.partitions
        if entry.error_code != ErrorCode.UNSTABLE_OFFSET_COMMIT or time.monotonic() > deadline:
            if entry.error_code:
                raise error_for(entry.error_code, f"the sink mark of partition {partition}")
            return int(entry.offset)
        await asyncio.sleep(producer.settings.retry_backoff_ms / 1000)  # a commit under way: wait it out


@dataclasses.dataclass(frozen=True, slots=True)
class SinkTask:
    """Which task of which micro-batch of which query."""

    query_id: str
    batch_id: int
    partition: int


async def write_prepared(
    options: WriteOptions, task: SinkTask, send_rows: Callable[[Producer], Awaitable[int]]
) -> PreparedTransaction:
    """Phase one for one task (`send_rows(producer)` writes the task's rows, returns their count)."""
    query_id, batch_id, partition = task.query_id, task.batch_id, task.partition
    async with _producer(options, query_id, partition) as producer:
        if await _sink_mark(producer, query_id, partition) > batch_id:
            return PreparedTransaction(0, "", -1, -1)  # committed by an earlier run of this batch
        await producer.init_transactions()  # fences an earlier attempt, aborts what it left open
        producer.begin_transaction()
        written = await send_rows(producer)
        mark = {TopicPartition(MARK_TOPIC, partition): batch_id + 1}
        await producer.send_offsets_to_transaction(mark, sink_group(query_id))
        producer_id, epoch = await producer.prepare_transaction()
    return PreparedTransaction(int(written), transactional_id(query_id, partition), producer_id, epoch)


async def commit_prepared(
    options: WriteOptions, messages: Sequence[WriterCommitMessage | None], *, commit: bool
) -> None:
    """Phase two, on the driver: commit (or abort) every task's prepared transaction. A commit
    that fails raises (the batch is then run again); an abort's failures are ignored."""
    for message in messages:
        if not isinstance(message, PreparedTransaction) or not message.transactional_id:
            continue
        client = {"transaction_timeout_ms": TRANSACTION_TIMEOUT_MS, **options.client}
        async with Producer(list(options.bootstrap), transactional_id=message.transactional_id, **client) as producer:
            producer.resume_transaction(message.producer_id, message.producer_epoch)
            if commit:
                await producer.commit_transaction()
            else:
                try:
                    await producer.abort_transaction()
                except Exception:  # fenced or ended already: nothing left to abort
                    continue
