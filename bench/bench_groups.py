"""Consumer group benchmark: how fast a group is stable again, and how fast a group consumes.

    .venv/bin/python bench/bench_groups.py [--records 600000] [--rounds 5]

Starts etcd, 2 controllers, 3 brokers and 2 group coordinators (tidelog.dev.local_cluster), then:
- rebalance: 10 consumers are stable on a 12-partition topic; an 11th joins; the time until all 11
  are stable in one generation with every partition owned exactly once. Issue 5's target: ≤ 1 s
  beyond group.initial.rebalance.delay.ms — which only a group's first rebalance waits (Kafka's
  rule, as here), so the join into a stable group is measured as is. `--rounds` times each (the
  11th leaves in between), for cooperative-sticky (KIP-429: two rounds, only one partition moves)
  and for range (eager: everyone revokes everything and rejoins).
- throughput: a 3-member group reads `--records` 100-byte records from 6 partitions, counted from
  the moment the group is stable — once with the members in this process, once with a process per
  member (as they are deployed; the machine's two cores are then shared as they would be).
Reference printed in the same run: one plain Consumer assigned all 6 partitions reading the same
records (no group) — the group's figure is a ratio of it.
- churn (issue 39): 4 commit-after-process members (commit after each poll and in
  on_partitions_revoked) read a 12-partition topic fed continuously while a 5th joins and closes,
  `--churn` times (two rebalances each): records processed twice per 1,000 rebalances (graceful
  changes only: Kafka's commit rules and the revocation commit make it 0), and, for
  cooperative-sticky, the longest gap on a partition a member kept through a rebalance against the
  gap between polls outside one (the reference, from the same run).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import structlog

from tidelog.client import AdminClient, Consumer, GroupConsumer, Producer, TopicPartition
from tidelog.common.errors import TidelogError
from tidelog.dev.local_cluster import LocalCluster

INITIAL_DELAY_MS = 3000
WIDE_PARTITIONS = 12
DEEP_PARTITIONS = 6
SETTLE_TIMEOUT_S = 60.0


def _member(cluster: LocalCluster, group: str, strategy: str) -> GroupConsumer:
    return GroupConsumer(
        cluster.bootstrap,
        group,
        auto_offset_reset="earliest",
        session_timeout_ms=10_000,
        heartbeat_interval_ms=100,
        partition_assignment_strategy=[strategy],
        enable_auto_commit=False,
        max_poll_records=100_000,
    )


def _stable(members: list[GroupConsumer], partitions: int) -> bool:
    """One generation, nobody rejoining, every partition owned by exactly one member."""
    owned = [tp for member in members for tp in member.assignment()]
    return (
        len(owned) == partitions == len(set(owned))
        and len({member.generation_id for member in members}) == 1
        and all(not member.membership.rejoin_needed and member._join_task is None for member in members)
    )


async def _until_stable(members: list[GroupConsumer], partitions: int) -> float:
    started = time.monotonic()
    while not _stable(members, partitions):
        if time.monotonic() - started > SETTLE_TIMEOUT_S:
            raise RuntimeError(f"group not stable after {SETTLE_TIMEOUT_S} s")
        await asyncio.gather(*(member.poll(20) for member in members))
    return time.monotonic() - started


async def rebalance_times(cluster: LocalCluster, strategy: str, rounds: int) -> tuple[float, list[float]]:
    """(seconds for 10 to be stable from nothing, seconds to be stable again after an 11th joins ×rounds)."""
    group = f"rebalance-{strategy}"
    members = [_member(cluster, group, strategy) for _ in range(10)]
    for member in members:
        member.subscribe(["wide"])
    first = await _until_stable(members, WIDE_PARTITIONS)
    joins = []
    for _ in range(rounds):
        newcomer = _member(cluster, group, strategy)
        newcomer.subscribe(["wide"])
        joins.append(await _until_stable([*members, newcomer], WIDE_PARTITIONS))
        await newcomer.close()
        await _until_stable(members, WIDE_PARTITIONS)
    for member in members:
        await member.close()
    return first, joins


class _PauseNewPartitions:
    def __init__(self, member: GroupConsumer) -> None:
        self.member = member

    async def on_partitions_assigned(self, partitions: set[TopicPartition]) -> None:
        self.member.pause(partitions)

    async def on_partitions_revoked(self, partitions: set[TopicPartition]) -> None:
        pass

    async def on_partitions_lost(self, partitions: set[TopicPartition]) -> None:
        pass


async def group_throughput(cluster: LocalCluster, records: int) -> float:
    members = [_member(cluster, "readers", "cooperative-sticky") for _ in range(3)]
    for member in members:
        member.subscribe(["deep"], listener=_PauseNewPartitions(member))
    await _until_stable(members, DEEP_PARTITIONS)  # reading nothing yet: the clock starts once stable
    for member in members:
        member.resume(member.assignment())
    count = 0
    started = time.monotonic()
    while count < records:
        count += sum(len(batch) for batch in await asyncio.gather(*(member.poll(200) for member in members)))
    elapsed = time.monotonic() - started
    for member in members:
        await member.close()
    assert count == records, f"read {count} of {records}"
    return records / elapsed


async def _member_process(bootstrap: list[str]) -> None:
    """One member of the process-per-member group (`--member`): reports its assignment as JSON lines
    until told "go" on stdin, then reads its partitions to their end and reports the count."""
    member = GroupConsumer(
        bootstrap,
        "process-readers",
        auto_offset_reset="earliest",
        session_timeout_ms=10_000,
        heartbeat_interval_ms=100,
        partition_assignment_strategy=["cooperative-sticky"],
        enable_auto_commit=False,
        max_poll_records=100_000,
    )
    member.subscribe(["deep"], listener=_PauseNewPartitions(member))
    stdin = asyncio.StreamReader()
    await asyncio.get_running_loop().connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdin), sys.stdin)
    go = asyncio.create_task(stdin.readline())
    while not go.done():
        await member.poll(50)
        steady = not member.membership.rejoin_needed and member._join_task is None
        partitions = sorted(tp.partition for tp in member.assignment())
        print(json.dumps({"generation": member.generation_id, "steady": steady, "partitions": partitions}), flush=True)
    owned = sorted(member.assignment())
    ends = await member.consumer.list_offsets(owned, -1)
    member.resume(owned)
    count, wanted = 0, sum(ends.values())
    while count < wanted:
        count += len(await member.poll(200))
    print(json.dumps({"count": count}), flush=True)
    await member.close()


async def group_throughput_processes(cluster: LocalCluster, records: int) -> float:
    """A 3-member group, each member its own process (as deployed): from "go" until all have read."""
    members = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            __file__,
            "--member",
            ",".join(cluster.bootstrap),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        for _ in range(3)
    ]
    latest: list[dict[str, object]] = [{} for _ in members]
    finished: list[asyncio.Future[int]] = [asyncio.get_running_loop().create_future() for _ in members]

    async def follow(index: int, process: asyncio.subprocess.Process) -> None:
        assert process.stdout is not None
        async for line in process.stdout:
            latest[index] = report = json.loads(line)
            if "count" in report:
                finished[index].set_result(int(report["count"]))

    readers = [asyncio.create_task(follow(index, process)) for index, process in enumerate(members)]

    def stable() -> bool:
        owned = [set(report.get("partitions", [])) for report in latest]  # type: ignore[call-overload]
        return (
            all(report.get("steady") for report in latest)
            and len({report.get("generation") for report in latest}) == 1
            and sum(map(len, owned)) == DEEP_PARTITIONS == len(set().union(*owned))
        )

    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while not stable():
        if time.monotonic() > deadline:
            raise RuntimeError(f"process group not stable after {SETTLE_TIMEOUT_S} s: {latest}")
        await asyncio.sleep(0.05)
    started = time.monotonic()
    for process in members:
        assert process.stdin is not None
        process.stdin.write(b"go\n")
        await process.stdin.drain()
    counts = await asyncio.gather(*finished)
    elapsed = time.monotonic() - started
    for process in members:
        await process.wait()
    await asyncio.gather(*readers)
    assert sum(counts) == records, f"read {sum(counts)} of {records}"
    return records / elapsed


async def plain_throughput(cluster: LocalCluster, records: int) -> float:
    async with Consumer(cluster.bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition("deep", p) for p in range(DEEP_PARTITIONS)])
        count = 0
        started = time.monotonic()
        while count < records:
            count += len(await consumer.poll(200))
        return records / (time.monotonic() - started)


class _CommitOnRevoke:
    """Commit-after-process's listener: what was processed is committed before a partition moves.
    A partition that moves stops being "kept": `forget` drops it from the gap bookkeeping."""

    def __init__(self, member: GroupConsumer, forget: Callable[[set[TopicPartition]], None]) -> None:
        self.member = member
        self.forget = forget

    async def on_partitions_revoked(self, partitions: set[TopicPartition]) -> None:
        positions = self.member._positions()
        await self.member.commit({tp: positions[tp] for tp in partitions if tp in positions})
        self.forget(partitions)

    async def on_partitions_assigned(self, partitions: set[TopicPartition]) -> None:
        pass

    async def on_partitions_lost(self, partitions: set[TopicPartition]) -> None:
        self.forget(partitions)


class _Churn:
    """Commit-after-process members of one group, polled together; what they processed and when."""

    def __init__(self, cluster: LocalCluster, strategy: str) -> None:
        self.cluster, self.strategy = cluster, strategy
        self.topic, self.group = f"churn-{strategy}", f"churners-{strategy}"
        self.processed: dict[tuple[int, int], int] = {}
        self.generations: set[int] = set()
        self.last_seen: dict[tuple[int, TopicPartition], float] = {}
        self.kept: list[float] = []  # gaps on a partition kept through a rebalance
        self.normal: list[float] = []  # gaps between polls outside one
        self.stop = asyncio.Event()

    async def feed(self) -> None:
        async with Producer(self.cluster.bootstrap, linger_ms=2) as producer:
            while not self.stop.is_set():
                for partition in range(WIDE_PARTITIONS):
                    await producer.send_batch(self.topic, [b"x" * 100] * 5, partition=partition)
                await asyncio.sleep(0.02)

    def join(self, index: int) -> GroupConsumer:
        member = _member(self.cluster, self.group, self.strategy)

        def forget(partitions: set[TopicPartition]) -> None:
            for tp in partitions:
                self.last_seen.pop((index, tp), None)

        member.subscribe([self.topic], listener=_CommitOnRevoke(member, forget))
        return member

    async def step(self, index: int, member: GroupConsumer) -> None:
        rebalancing = member._join_task is not None
        records = await member.poll(50)
        now = time.monotonic()
        for record in records:
            key = (record.partition, record.offset)
            self.processed[key] = self.processed.get(key, 0) + 1
        for tp in {TopicPartition(record.topic, record.partition) for record in records}:
            before = self.last_seen.get((index, tp))
            self.last_seen[(index, tp)] = now
            if before is not None:
                gaps = self.kept if rebalancing or member._join_task is not None else self.normal
                gaps.append(now - before)
        if member.generation_id >= 0:
            self.generations.add(member.generation_id)
        if records:
            with contextlib.suppress(TidelogError):  # refused: redelivered unless committed before it moves
                await member.commit()

    async def poll_until_closed(self, index: int, member: GroupConsumer, closing: asyncio.Event) -> None:
        """Each member polls on its own, as each would in its own service."""
        while not closing.is_set():
            await self.step(index, member)
        await member.close()

    async def settle(self, members: list[GroupConsumer]) -> None:
        started = time.monotonic()
        while not _stable(members, WIDE_PARTITIONS):
            if time.monotonic() - started > SETTLE_TIMEOUT_S:
                raise RuntimeError(f"group not stable after {SETTLE_TIMEOUT_S} s")
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.5)  # polls outside a rebalance, for the reference gap


async def churn(cluster: LocalCluster, strategy: str, cycles: int) -> tuple[int, int, list[float], list[float]]:
    """(rebalances, records processed twice, kept-partition gaps through a rebalance, gaps outside one)."""
    run = _Churn(cluster, strategy)
    async with AdminClient(cluster.bootstrap, controllers=cluster.controller_endpoints) as admin:
        await admin.create_topic(run.topic, WIDE_PARTITIONS, 1)
    members = [run.join(index) for index in range(4)]
    closing = asyncio.Event()
    polling = [asyncio.create_task(run.poll_until_closed(i, m, closing)) for i, m in enumerate(members)]
    feeding = asyncio.create_task(run.feed())
    await run.settle(members)
    first_generation = min(run.generations)
    for _ in range(cycles):
        newcomer, leaving = run.join(len(members)), asyncio.Event()
        newcomer_polling = asyncio.create_task(run.poll_until_closed(len(members), newcomer, leaving))
        await run.settle([*members, newcomer])
        leaving.set()
        await newcomer_polling
        for key in [key for key in run.last_seen if key[0] == len(members)]:
            del run.last_seen[key]  # the next newcomer has the same index: its gaps start afresh
        await run.settle(members)
    run.stop.set()
    closing.set()
    await asyncio.gather(feeding, *polling)
    twice = sum(count - 1 for count in run.processed.values())
    return max(run.generations) - first_generation, twice, run.kept, run.normal


def _summary(times: list[float]) -> str:
    return f"p50 {statistics.median(times):5.2f} s  max {max(times):5.2f} s"


async def run(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="tidelog-bench-groups-") as folder:
        cluster = LocalCluster(
            Path(folder),
            coordinators=2,
            coordinator_args=[
                "--offsets-topic-num-partitions",
                "12",
                "--group-initial-rebalance-delay-ms",
                str(INITIAL_DELAY_MS),
                "--group-min-session-timeout-ms",
                "1000",
            ],
        )
        cluster.start()
        try:
            await cluster.wait_ready()
            async with AdminClient(cluster.bootstrap, controllers=cluster.controller_endpoints) as admin:
                await admin.create_topic("wide", WIDE_PARTITIONS, 1)
                await admin.create_topic("deep", DEEP_PARTITIONS, 1)
            async with Producer(
                cluster.bootstrap, batch_size=1024 * 1024, max_request_size=8 * 1024 * 1024
            ) as producer:
                await (await producer.send_batch("deep", [b"x" * 100] * args.records))
            cooperative = await rebalance_times(cluster, "cooperative-sticky", args.rounds)
            eager = await rebalance_times(cluster, "range", args.rounds)
            churned = {name: await churn(cluster, name, args.churn) for name in ("cooperative-sticky", "range")}
            reference = await plain_throughput(cluster, args.records)
            grouped = await group_throughput(cluster, args.records)
            separate = await group_throughput_processes(cluster, args.records)
        finally:
            cluster.stop()
    print("consumer groups, 3 brokers, 2 coordinators, 12 partitions, heartbeat.interval.ms=100")
    for name, (first, joins) in (("cooperative-sticky", cooperative), ("range", eager)):
        print(f"  {name}:")
        print(f"    10 consumers, empty group to stable   {first:5.2f} s   (initial delay {INITIAL_DELAY_MS} ms in it)")
        print(f"    an 11th joins a stable group of 10    {_summary(joins)}   (target <= 1 s)")
    for name, (rebalances, twice, kept, normal) in churned.items():
        per_thousand = 1000 * twice / max(rebalances, 1)
        print(
            f"  {name}, commit-after-process under churn: {rebalances} rebalances, "
            f"{twice} records processed twice = {per_thousand:.1f} per 1,000 rebalances (target 0)"
        )
        if name == "cooperative-sticky" and kept and normal:
            print(
                f"    kept-partition gap through a rebalance: p50 {statistics.median(kept):.3f} s,"
                f" max {max(kept):.3f} s;"
                f" reference, between polls outside one: p50 {statistics.median(normal):.3f} s,"
                f" max {max(normal):.3f} s   ratio of maxima {max(kept) / max(normal):.2f}"
            )
    print(f"  reference: one plain consumer, {DEEP_PARTITIONS} partitions   {reference:12,.0f} records/s")
    print(
        f"  a 3-member group, {DEEP_PARTITIONS} partitions                {grouped:12,.0f} records/s"
        f"   ratio {grouped / reference:.2f}   (members in this one process)"
    )
    print(
        f"  a 3-member group, a process per member          {separate:12,.0f} records/s"
        f"   ratio {separate / reference:.2f}"
    )


def main() -> None:
    if sys.argv[1:2] == ["--member"]:  # stdout carries the member's reports: the client's log goes to stderr
        structlog.configure(
            wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
            logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        )
        asyncio.run(_member_process(sys.argv[2].split(",")))
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=600_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--churn", type=int, default=25, help="a member joins and closes this many times")
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))  # the client's info lines
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
