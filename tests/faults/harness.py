"""What every fault scenario shares: an idempotent producer writing continuously with acks=all,
a consumer reading all along, and the checks.

The checks: every acknowledged record is consumed, offsets in order and each once, no record
twice, acknowledged records in acknowledgement order; whatever the live consumer saw during the
faults is in the final log at the same offset (it reads below the high watermark, so nothing it
saw may be truncated away); and the partition's state history in etcd never gives one leader
epoch to two leaders, nor lets an epoch go back. Then one line with records acked / consumed /
lost / duplicated and the failover times (fault → next acknowledged produce).
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import contextlib
import itertools
import math
import statistics
import time
from collections.abc import AsyncIterator

from etcd3aio import Etcd3Client

from tests.cluster.conftest import wait_until
from tests.faults import summary
from tidelog.client import AdminClient, Consumer, Producer, TopicPartition
from tidelog.common.errors import TopicAlreadyExistsError
from tidelog.dev.local_cluster import LocalCluster
from tidelog.server_common.metadata import PartitionStateRecord, partition_state_key

TOPIC = "faults"


class ContinuousProducer:
    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self.acknowledged: list[tuple[int, bytes]] = []
        self.ack_times: list[tuple[float, float]] = []  # (sent at, acknowledged at) of each, in order
        self.last_ack = time.monotonic()
        self.last_ack_sent_at = 0.0
        self.longest_gap = 0.0  # seconds between two acknowledgements, at most
        self.failovers: list[float] = []
        self.errors: collections.Counter[str] = collections.Counter()  # failed deliveries, by error type
        self.reader: ContinuousConsumer | None = None
        self._stop = asyncio.Event()

    async def run(self) -> None:
        number = 0
        async with Producer(self.cluster.bootstrap, acks="all", linger_ms=2, retry_backoff_ms=50) as producer:
            assert producer.settings.idempotent
            while not self._stop.is_set():
                value = b"%07d" % number
                number += 1
                sent_at = time.monotonic()
                try:
                    metadata = await (await producer.send(TOPIC, value, partition=0))
                except Exception as error:  # a failed delivery is not acknowledged: not counted
                    self.errors[type(error).__name__] += 1
                    continue
                self.acknowledged.append((metadata.offset, value))
                now = time.monotonic()
                self.ack_times.append((sent_at, now))
                if len(self.acknowledged) > 1:
                    self.longest_gap = max(self.longest_gap, now - self.last_ack)
                self.last_ack = now
                self.last_ack_sent_at = sent_at

    async def wait_acks(self, count: int) -> None:
        target = len(self.acknowledged) + count

        async def enough() -> bool:
            return len(self.acknowledged) >= target

        await wait_until(enough, timeout_s=60, what=f"{count} more acknowledgements")

    async def time_failover(self, since: float) -> None:
        async def acked_after() -> bool:  # a record sent after the fault, acknowledged
            return self.last_ack_sent_at > since

        await wait_until(acked_after, timeout_s=60, what="an acknowledgement after the fault")
        # The first record sent after the fault that was acknowledged: sends are sequential, so
        # sent-at times grow along the list.
        first = bisect.bisect_right(self.ack_times, (since, math.inf))
        self.failovers.append(self.ack_times[first][1] - since)

    def stop(self) -> None:
        self._stop.set()


class ContinuousConsumer:
    """Reads the partition from the start while the faults happen; keeps (offset, value) seen."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self.seen: list[tuple[int, bytes]] = []
        self._stop = asyncio.Event()

    async def run(self) -> None:
        while not self._stop.is_set():
            try:
                async with Consumer(self.cluster.bootstrap, auto_offset_reset="earliest") as consumer:
                    consumer.assign([TopicPartition(TOPIC, 0)])
                    if self.seen:
                        consumer.seek(TopicPartition(TOPIC, 0), self.seen[-1][0] + 1)
                    while not self._stop.is_set():
                        self.seen.extend((record.offset, record.value or b"") for record in await consumer.poll(200))
            except Exception:  # a broker gone mid-request: start again from where we were
                await asyncio.sleep(0.1)

    def stop(self) -> None:
        self._stop.set()


@contextlib.asynccontextmanager
async def writing(
    cluster: LocalCluster, admin: AdminClient, configs: dict[str, str] | None = None
) -> AsyncIterator[ContinuousProducer]:
    try:
        await admin.create_topic(TOPIC, 1, 3, {"min.insync.replicas": "2", **(configs or {})})
    except TopicAlreadyExistsError:
        # A first attempt that outlived the admin's request timeout on a loaded machine still
        # created it, and the retry found it: the topic is ours if it is the one we asked for.
        described = (await admin.describe_topics([TOPIC]))[TOPIC]
        assert not isinstance(described, Exception) and len(described.partitions) == 1, described
        assert len(described.partitions[0].replicas) == 3, described
    producer = ContinuousProducer(cluster)
    reader = ContinuousConsumer(cluster)
    producer.reader = reader
    tasks = [asyncio.create_task(producer.run()), asyncio.create_task(reader.run())]
    try:
        await producer.wait_acks(100)
        yield producer
    finally:
        producer.stop()
        reader.stop()
        await asyncio.wait_for(asyncio.gather(*tasks), 120)


async def isr_size(admin: AdminClient) -> int:
    described = (await admin.describe_topics([TOPIC]))[TOPIC]
    return 0 if isinstance(described, Exception) else len(described.partitions[0].isr)


async def leader(admin: AdminClient) -> int:
    described = (await admin.describe_topics([TOPIC]))[TOPIC]
    assert not isinstance(described, Exception)
    return int(described.partitions[0].leader)


async def verify(cluster: LocalCluster, producer: ContinuousProducer, scenario: str) -> None:
    acknowledged = producer.acknowledged
    consumed: list[tuple[int, bytes]] = []
    async with Consumer(cluster.bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(TOPIC, 0)])
        end = max(offset for offset, _ in acknowledged) + 1

        async def everything() -> bool:
            consumed.extend((record.offset, record.value or b"") for record in await consumer.poll(500))
            return bool(consumed) and consumed[-1][0] + 1 >= end

        await wait_until(everything, timeout_s=60, what="the whole log")
    by_offset = dict(consumed)
    lost = [(offset, value) for offset, value in acknowledged if by_offset.get(offset) != value]
    values = [value for _, value in consumed]
    failovers = producer.failovers
    duplicated = len(values) - len(set(values))
    epochs = await leader_epoch_history(cluster)
    print(
        f"\n{scenario}: acked {len(acknowledged)}, consumed {len(consumed)}, lost {len(lost)}, "
        f"failed sends {dict(producer.errors) or 0}, "
        f"duplicated {duplicated}, leader epochs {len(epochs)}, failover s: "
        f"{', '.join(f'{t:.2f}' for t in failovers) or '-'}"
        + (f" (p50 {statistics.median(failovers):.2f})" if failovers else "")
    )
    reordered = sum(1 for (a, _), (b, _) in itertools.pairwise(acknowledged) if b <= a)
    summary.record(
        scenario,
        acknowledged=len(acknowledged),
        lost=len(lost),
        duplicated=duplicated,
        reordered=reordered,
        longest_unavailability_s=producer.longest_gap,
    )
    assert not lost, f"acknowledged records lost: {lost[:5]}"
    assert not duplicated, "the idempotent producer's retries are written once"
    assert not reordered, "acknowledged in the order sent, at growing offsets"
    assert producer.reader is not None and producer.reader.seen, "the live consumer read records"
    vanished = [(offset, value) for offset, value in producer.reader.seen if by_offset.get(offset) != value]
    assert not vanished, f"records a consumer saw were later truncated or replaced: {vanished[:5]}"
    leaders_by_epoch: dict[int, set[int]] = {}
    for epoch, leader_id in epochs:
        if leader_id >= 0:
            leaders_by_epoch.setdefault(epoch, set()).add(leader_id)
    assert all(len(leaders) == 1 for leaders in leaders_by_epoch.values()), f"two leaders in one epoch: {epochs}"
    assert [epoch for epoch, _ in epochs] == sorted(epoch for epoch, _ in epochs), "leader epochs never go back"
    offsets = [offset for offset, _ in consumed]
    assert offsets == sorted(set(offsets)), "offsets in order, each once"
    first_seen: dict[bytes, int] = {}
    for offset, value in consumed:
        first_seen.setdefault(value, offset)
    order = [first_seen[value] for _, value in acknowledged]
    assert order == sorted(order), "acknowledged records appear in the order they were acknowledged"


async def leader_epoch_history(cluster: LocalCluster) -> list[tuple[int, int]]:
    """(leader epoch, leader) of every version of the partition's state etcd kept, oldest first."""
    key = partition_state_key(TOPIC, 0)
    etcd = Etcd3Client([cluster.etcd.endpoint])
    await etcd.connect()
    try:
        assert etcd.kv is not None and etcd.watch is not None
        current = await etcd.kv.get(key)
        last_revision = int(current.kvs[0].mod_revision)
        history: list[tuple[int, int]] = []

        async def replay() -> None:
            assert etcd.watch is not None
            async for response in etcd.watch.watch(key, start_revision=1):
                for event in response.events:
                    if not event.kv.value:  # a delete: the topic never is, during a scenario
                        continue
                    state = PartitionStateRecord.from_json(event.kv.value)
                    history.append((state.leader_epoch, state.leader))
                    if event.kv.mod_revision >= last_revision:
                        return

        await asyncio.wait_for(replay(), 30)
        return history
    finally:
        await etcd.close()
