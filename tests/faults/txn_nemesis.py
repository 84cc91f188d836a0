"""A transactional nemesis in Jepsen's manner (issue 34): transactional producers and a
consume–transform–produce member under overlapping faults, then a check of what read_committed
readers saw and what the log ends up holding.

Workloads, all through the public API:
- PRODUCERS transactional producers, each a loop of transactions of a few records spread over two
  topics (5 partitions), most committed, some aborted; each transaction's values are unique and
  name it. A producer that is fenced or fails for good is closed and started again under the same
  transactional.id (its unfinished transaction then has no known outcome).
- a consume–transform–produce member: a read_committed GroupConsumer and a transactional producer
  copying an input topic to an output topic, the input offsets committed in the transaction; it is
  restarted the same way.
- a live read_committed reader of every output partition, all along.

Faults: the process nemesis of nemesis.py (kill -9 and SIGSTOP of leaders and brokers, kill -9 of
the active controller) plus kill -9 of a coordinator (the transaction and group coordinators).

Checked, on a read_committed read of everything once healed, and on what the live reader saw:
- no aborted read: no record of a transaction whose abort was acknowledged;
- atomicity: of every transaction, all its records or none (those of unknown outcome too);
- no committed write lost: every record of a transaction whose commit was acknowledged;
- no duplicates; each producer's transactions in order within a partition;
- consume–transform–produce: every input once in the output;
- the live reader never saw a record the final read does not hold at the same offset.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import random
import signal
from pathlib import Path

from tests.cluster.conftest import COORDINATOR_ARGS, started_cluster, wait_until
from tests.faults.nemesis import DOWN_S, Nemesis
from tidelog.client import AdminClient, Consumer, GroupConsumer, Producer, TopicPartition
from tidelog.dev.local_cluster import LocalCluster

TOPICS = {"txn-a": 3, "txn-b": 2}
SOURCE, SINK, GROUP = "ctp-in", "ctp-out", "ctp-group"
INPUTS = 600
PRODUCERS = 3
SESSION_MS = 1000
RECORDS_PER_TRANSACTION = (2, 6)
ABORT_SHARE = 0.25
PRODUCER_SETTINGS = {"transaction_timeout_ms": 10_000, "delivery_timeout_ms": 30_000, "max_block_ms": 30_000}


@dataclasses.dataclass(slots=True)
class Transaction:
    producer: int
    number: int
    values: dict[bytes, TopicPartition]  # value → where it was sent
    outcome: str = "unknown"  # committed / aborted once acknowledged as such


@dataclasses.dataclass(slots=True)
class TxnReport:
    seed: int
    committed: int
    aborted: int
    unknown: int
    aborted_read: list[str]
    partial: list[str]
    lost: list[str]
    duplicated: list[str]
    reordered: list[str]
    replaced: list[str]
    ctp_missing: list[str]
    ctp_duplicated: list[str]
    restarts: collections.Counter[str]
    faults: list[str] = dataclasses.field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (
            self.aborted_read
            or self.partial
            or self.lost
            or self.duplicated
            or self.reordered
            or self.replaced
            or self.ctp_missing
            or self.ctp_duplicated
        )

    def details(self) -> str:
        lines = [
            f"seed {self.seed}: transactions committed {self.committed}, aborted {self.aborted}, unknown "
            f"{self.unknown}; restarts {dict(self.restarts)}",
            f"  faults: {self.faults}",
        ]
        for name in (
            "aborted_read",
            "partial",
            "lost",
            "duplicated",
            "reordered",
            "replaced",
            "ctp_missing",
            "ctp_duplicated",
        ):
            items: list[str] = getattr(self, name)
            lines.append(f"  {name}: {len(items)} {items[:5]}")
        return "\n".join(lines)


def _value(producer: int, number: int, index: int) -> bytes:
    return b"t%d-%06d-%d" % (producer, number, index)


def _parse(value: bytes) -> tuple[int, int] | None:
    try:
        producer, number, _ = value.decode().split("-")
        return int(producer[1:]), int(number)
    except (UnicodeDecodeError, ValueError):
        return None


class TransactionalWriters:
    def __init__(self, cluster: LocalCluster, rng: random.Random) -> None:
        self.cluster = cluster
        self.random = rng
        self.transactions: list[Transaction] = []
        self.restarts: collections.Counter[str] = collections.Counter()
        self._stop = asyncio.Event()
        self.partitions = [TopicPartition(topic, p) for topic, count in TOPICS.items() for p in range(count)]

    async def run(self) -> None:
        await asyncio.gather(*(self._writer(producer) for producer in range(PRODUCERS)))

    async def _writer(self, producer_number: int) -> None:
        number = 0
        while not self._stop.is_set():
            try:
                async with Producer(
                    self.cluster.bootstrap, transactional_id=f"writer-{producer_number}", **PRODUCER_SETTINGS
                ) as producer:
                    await producer.init_transactions()
                    while not self._stop.is_set():
                        number += 1
                        await self._one(producer, producer_number, number)
            except Exception as error:  # fenced, timed out, or the cluster away: a new instance
                self.restarts[f"writer: {type(error).__name__}"] += 1
                await asyncio.sleep(0.2)

    async def _one(self, producer: Producer, producer_number: int, number: int) -> None:
        count = self.random.randint(*RECORDS_PER_TRANSACTION)
        transaction = Transaction(producer_number, number, {})
        self.transactions.append(transaction)
        producer.begin_transaction()
        deliveries = []
        for index in range(count):
            target = self.random.choice(self.partitions)
            value = _value(producer_number, number, index)
            transaction.values[value] = target
            deliveries.append(await producer.send(target.topic, value, partition=target.partition))
        abort = self.random.random() < ABORT_SHARE
        if abort:
            for delivery in deliveries:  # written first, so the abort covers records in the log
                with contextlib.suppress(Exception):
                    await delivery
            await producer.abort_transaction()
            transaction.outcome = "aborted"
        else:
            await producer.commit_transaction()
            transaction.outcome = "committed"

    def stop(self) -> None:
        self._stop.set()


class Copier:
    """Consume–transform–produce: every input once in the output, offsets in the transaction."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self.restarts: collections.Counter[str] = collections.Counter()
        self.done = asyncio.Event()
        self._stop = asyncio.Event()

    async def run(self) -> None:
        while not (self._stop.is_set() or self.done.is_set()):
            try:
                await self._member()
            except Exception as error:
                self.restarts[f"copier: {type(error).__name__}"] += 1
                await asyncio.sleep(0.2)

    async def _member(self) -> None:
        async with (
            GroupConsumer(
                self.cluster.bootstrap,
                GROUP,
                isolation_level="read_committed",
                enable_auto_commit=False,
                auto_offset_reset="earliest",
                max_poll_records=50,
                session_timeout_ms=6000,
                heartbeat_interval_ms=500,
            ) as consumer,
            Producer(self.cluster.bootstrap, transactional_id="copier", **PRODUCER_SETTINGS) as producer,
        ):
            consumer.subscribe([SOURCE])
            await producer.init_transactions()
            while not (self._stop.is_set() or self.done.is_set()):
                records = await consumer.poll(200)
                if not records:
                    tps = [TopicPartition(SOURCE, p) for p in range(3)]
                    committed = await consumer.committed(tps)
                    if sum(offset or 0 for offset in committed.values()) >= INPUTS:
                        self.done.set()
                    continue
                producer.begin_transaction()
                ends: dict[TopicPartition, int] = {}
                for record in records:
                    await producer.send(SINK, b"out-" + (record.value or b""), partition=record.partition)
                    ends[TopicPartition(record.topic, record.partition)] = record.offset + 1
                await producer.send_offsets_to_transaction(ends, consumer)
                await producer.commit_transaction()

    def stop(self) -> None:
        self._stop.set()


class CommittedReader:
    """A read_committed reader of every written partition, all along."""

    def __init__(self, cluster: LocalCluster, partitions: list[TopicPartition]) -> None:
        self.cluster = cluster
        self.partitions = partitions
        self.seen: list[tuple[TopicPartition, int, bytes]] = []
        self._next: dict[TopicPartition, int] = {}
        self._stop = asyncio.Event()

    async def run(self) -> None:
        while not self._stop.is_set():
            try:
                async with Consumer(
                    self.cluster.bootstrap, isolation_level="read_committed", auto_offset_reset="earliest"
                ) as consumer:
                    consumer.assign(self.partitions)
                    for tp, offset in self._next.items():
                        consumer.seek(tp, offset)
                    while not self._stop.is_set():
                        for record in await consumer.poll(200):
                            tp = TopicPartition(record.topic, record.partition)
                            self.seen.append((tp, record.offset, record.value or b""))
                            self._next[tp] = record.offset + 1
            except Exception:  # a broker gone mid-request: again from where it was
                await asyncio.sleep(0.1)

    def stop(self) -> None:
        self._stop.set()


class TxnNemesis(Nemesis):
    """nemesis.py's process faults, and kill -9 of a coordinator."""

    async def leaders(self) -> dict[int, tuple[int, list[int]]]:
        """The leaders its faults aim at: those of the first written topic's partitions."""
        topic = next(iter(TOPICS))
        described = (await self.admin.describe_topics([topic]))[topic]
        if isinstance(described, Exception):
            return {}
        return {p.partition: (p.leader, list(p.replicas)) for p in described.partitions}

    async def _one_fault(self) -> None:
        if self.random.random() < 0.2:
            await self._kill_a_coordinator()
        else:
            await super()._one_fault()

    async def _kill_a_coordinator(self) -> None:
        running = [name for name in self.cluster.names("coordinator") if name not in self.down]
        if len(running) < 2:
            return
        victim = self.random.choice(running)
        self.cluster.signal(victim, signal.SIGKILL)
        self.down.add(victim)
        self._later(self.random.uniform(*DOWN_S), lambda: self._restart_coordinator(victim))
        self._note(f"kill -9 {victim}")

    def _restart_coordinator(self, name: str) -> None:
        if name in self.down:
            self.down.discard(name)
            self.cluster.start_process(name)

    def _restart(self, name: str) -> None:
        if name.startswith("coordinator"):
            self._restart_coordinator(name)
        else:
            super()._restart(name)


async def read_committed_everything(
    cluster: LocalCluster, partitions: list[TopicPartition]
) -> dict[TopicPartition, list[tuple[int, bytes]]]:
    records: dict[TopicPartition, list[tuple[int, bytes]]] = {tp: [] for tp in partitions}
    async with Consumer(cluster.bootstrap, isolation_level="read_committed", auto_offset_reset="earliest") as consumer:

        async def quiet() -> dict[TopicPartition, int] | None:
            """Every transaction ended (a killed member's times out): the last stable offsets are the
            log ends, and nothing committed is hidden behind an open transaction."""
            stable = await consumer.list_offsets(partitions, -1, read_committed=True)
            ends = await consumer.list_offsets(partitions, -1, read_committed=False)
            return stable if stable == ends else None

        ends = await wait_until(quiet, timeout_s=60, what="every transaction ended")
        consumer.assign(partitions)

        async def everything() -> bool:
            for record in await consumer.poll(500):
                records[TopicPartition(record.topic, record.partition)].append((record.offset, record.value or b""))
            return all([await consumer.position(tp) >= end for tp, end in ends.items()])

        await wait_until(everything, timeout_s=60, what="the whole log, read_committed")
    return records


def check(
    seed: int,
    writers: TransactionalWriters,
    copier: Copier,
    reader: CommittedReader,
    final: dict[TopicPartition, list[tuple[int, bytes]]],
) -> TxnReport:
    where: dict[bytes, tuple[TopicPartition, int]] = {}
    duplicated: list[str] = []
    for tp, records in final.items():
        for offset, value in records:
            if value in where:
                duplicated.append(f"{value.decode()} at {where[value]} and {tp}@{offset}")
            where[value] = (tp, offset)
    aborted_read, partial, lost = [], [], []
    for transaction in writers.transactions:
        present = [value for value in transaction.values if value in where]
        name = f"t{transaction.producer}-{transaction.number} ({transaction.outcome})"
        if transaction.outcome == "aborted" and present:
            aborted_read.append(f"{name}: {len(present)} records read")
        if present and len(present) != len(transaction.values):
            partial.append(f"{name}: {len(present)} of {len(transaction.values)}")
        if transaction.outcome == "committed" and len(present) != len(transaction.values):
            lost.append(f"{name}: {len(transaction.values) - len(present)} missing")
    reordered = []
    for tp, records in final.items():
        last: dict[int, int] = {}
        for offset, value in records:
            parsed = _parse(value)
            if parsed is None:
                continue
            producer, number = parsed
            if number < last.get(producer, -1):
                reordered.append(f"{tp}@{offset}: producer {producer} transaction {number} after {last[producer]}")
            last[producer] = number
    at = {(tp, offset): value for tp, records in final.items() for offset, value in records}
    replaced = [
        f"{tp}@{offset}: read {value!r}, finally {at.get((tp, offset))!r}"
        for tp, offset, value in reader.seen
        if at.get((tp, offset)) != value
    ]
    outputs = collections.Counter(value for tp, records in final.items() if tp.topic == SINK for _, value in records)
    expected = {b"out-in-%06d" % number for number in range(INPUTS)}
    ctp_missing = sorted(value.decode() for value in expected - set(outputs))
    ctp_duplicated = sorted(value.decode() for value, count in outputs.items() if count > 1)
    outcomes = collections.Counter(transaction.outcome for transaction in writers.transactions)
    return TxnReport(
        seed,
        outcomes["committed"],
        outcomes["aborted"],
        outcomes["unknown"],
        aborted_read,
        partial,
        lost,
        duplicated,
        reordered,
        replaced,
        ctp_missing,
        ctp_duplicated,
        writers.restarts + copier.restarts,
    )


async def run_txn_nemesis(data_dir: Path, seed: int, duration_s: float) -> TxnReport:
    async with (
        started_cluster(
            data_dir,
            session_timeout_ms=SESSION_MS,
            coordinators=2,
            coordinator_args=COORDINATOR_ARGS,
            broker_args=["--replica-lag-time-max-ms", "2000"],
        ) as cluster,
        AdminClient(cluster.bootstrap, controllers=cluster.controller_endpoints) as admin,
    ):
        for topic, count in {**TOPICS, SOURCE: 3, SINK: 3}.items():
            await admin.create_topic(topic, count, 3, {"min.insync.replicas": "2"})
        async with Producer(cluster.bootstrap) as plain:
            for number in range(INPUTS):
                await plain.send(SOURCE, b"in-%06d" % number, partition=number % 3)
            await plain.flush()
        rng = random.Random(seed)
        writers, copier = TransactionalWriters(cluster, rng), Copier(cluster)
        partitions = [*writers.partitions, *(TopicPartition(SINK, p) for p in range(3))]
        reader = CommittedReader(cluster, partitions)
        nemesis = TxnNemesis(cluster, admin, seed)
        tasks = [asyncio.create_task(work.run()) for work in (writers, copier, reader)]

        async def committed_at_least(count: int) -> bool:
            return _committed_count(writers) >= count

        async def copied() -> bool:
            return copier.done.is_set()

        try:
            await wait_until(lambda: committed_at_least(10), timeout_s=60, what="transactions before the faults")
            await nemesis.run(duration_s)
            await cluster.wait_ready()
            before = _committed_count(writers)
            await wait_until(
                lambda: committed_at_least(before + PRODUCERS),
                timeout_s=90,
                what="transactions committed after healing",
            )
            await wait_until(copied, timeout_s=120, what="every input copied")
        finally:
            writers.stop()
            copier.stop()
            for task in tasks[:2]:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(task, 90)
            await asyncio.sleep(0)
            reader.stop()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(tasks[2], 30)
            await nemesis.heal_all()
        await cluster.wait_ready()
        final = await read_committed_everything(cluster, partitions)
        report = check(seed, writers, copier, reader, final)
        report.faults = [fault.what for fault in nemesis.faults]
        return report


def _committed_count(writers: TransactionalWriters) -> int:
    return sum(1 for transaction in writers.transactions if transaction.outcome == "committed")
