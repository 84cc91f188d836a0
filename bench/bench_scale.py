"""Scale benchmark (issue 18): what a cluster costs as the partition count grows.

    .venv/bin/python bench/bench_scale.py [--partitions 100,1000] [--idle-seconds 10]
                                          (issue 18's last step: --partitions 100,1000,10000)

For each count: a fresh local cluster (etcd, 2 controllers, 3 brokers), one topic of that many
partitions with RF 3, then:
- topic creation: create_topics → every partition has a leader (Metadata);
- idle CPU of each broker over `--idle-seconds` with nothing produced (percent of one core, from
  /proc/<pid>/stat), measured after as long again to settle, and each broker's resident memory;
- metadata: the slowest of 20 Metadata requests for every topic;
- produce/consume spread over every partition: send_batch of 100-byte records (one batch per
  partition), then poll_batches until everything is read;
- controller failover: kill -9 of the active controller → another one active (the standby sees
  the dead process's port refuse connections and revokes its lease: process_watch.py), and
  → every partition answered by its leader again (a produce to each partition acknowledged; the
  same with no fault is printed as its reference: the data path never needed the controller);
- crash detection: kill -9 of one broker → everything it led is led elsewhere and it is in no ISR
  (the controller saw the dead process's port refuse connections and revoked its lease:
  broker_liveness.py; the lease, broker.session.timeout.ms, is 6 s here);
- broker restart: kill -9 + start of one broker → its new life left every ISR and is back in all
  (each partition's state changed twice: out, then in), timed by the broker's `broker_in_sync` log
  line; and → ready (the leaderships it prefers handed back too, which its readiness waits for).
  Twice: started once the crash was detected, and started at once (the issue's figure: a crashed
  container restarted by its kubelet, its new life registering beside the old one's lease);
- rolling restart: each broker SIGTERMed and started in turn, the next once the restarted one is
  ready (no partition it hosts under-replicated: its pod's readiness probe), under an acks=all
  producer to an RF 3, min.insync.replicas 2 topic: the longest wait for an acknowledgement,
  with the steady second before as its reference, and sends that failed (target: none, and no
  wait above 100 ms);
- full garbage collections: how many each broker ran from its start through the produce and
  consume above, their mean pause and the longest (a histogram bucket's bound), from
  `tidelog_python_gc_pause_seconds` (each stops the broker's event loop: ADR 0028);
- stop: SIGTERM to every process at once (LocalCluster.stop: the brokers hand leaderships to each
  other, deregister and close every log) → all gone, and how many brokers had to be killed at the
  stop timeout (10 s) instead.
Each step from the consume on starts on a settled cluster (`settled`: every process below 10% of a
core over 0.3 s, the wait printed): the step before it has finished its after-work, which would
otherwise count in this step's figure.
References printed in the same run: the idle CPU of a broker holding no partition (the same cluster
before the topic exists), so per-partition cost is the difference; and the seconds this file
system takes to make as many folders as the topic has replicas, each with the files a new log
starts with, on 8 threads (`folders_reference`): creation's floor on this disk. Targets at 10,000 partitions:
creation ≤ 10 s, idle CPU ≤ 3% per broker, controller failover ≤ 2 s, metadata ≤ 100 ms; issue 37's:
stop ≤ 5 s with no broker killed, restart → every ISR ≤ 5 s, consume ≥ 500,000/s, produce ≥ 300,000/s.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import datetime
import json
import os
import re
import signal
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from tidelog.client import AdminClient, Consumer, Producer, TopicDescription, TopicPartition
from tidelog.dev.local_cluster import LocalCluster

TOPIC = "scale"
ROLLING_TOPIC = "rolling"  # written acks=all while the brokers restart in turn
ROLLING_PARTITIONS = 6
TICKS = os.sysconf("SC_CLK_TCK")
SETTLED_BUSY = 0.10  # of a core: idle at 10,000 partitions is about 0.02
SETTLE_WINDOW_S = 0.3


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def broker_pids(cluster: LocalCluster) -> dict[str, int]:
    return {name: process.pid for name, process in cluster.processes.items() if name.startswith("broker-")}


async def idle_cpu(cluster: LocalCluster, seconds: float) -> dict[str, float]:
    pids = broker_pids(cluster)
    before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    await asyncio.sleep(seconds)
    return {name: (cpu_seconds(pid) - before[name]) / seconds * 100 for name, pid in pids.items()}


async def settled(cluster: LocalCluster, before: str, timeout_s: float = 60) -> None:
    """Until every process of the cluster used at most `SETTLED_BUSY` of a core over
    `SETTLE_WINDOW_S`: the step before has finished its after-work (followers fetching what it
    wrote, the high watermarks' last round, flushes), which otherwise runs into the next step's
    figure (a produce's tail made the consume after it 25% slower; a reference pass's tail added
    0.2-0.6 s to the controller failover after it). Printed, so the wait is seen."""
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        pids = [process.pid for process in cluster.processes.values()]
        before_s = [cpu_seconds(pid) for pid in pids]
        await asyncio.sleep(SETTLE_WINDOW_S)
        busiest = max(cpu_seconds(pid) - was for pid, was in zip(pids, before_s, strict=True))
        if busiest <= SETTLED_BUSY * SETTLE_WINDOW_S:
            print(f"  (settled {time.monotonic() - started:.1f} s before {before})", flush=True)
            return
    print(f"  (not settled after {timeout_s:.0f} s before {before}: measured anyway)", flush=True)


async def all_led(admin: AdminClient, partitions: int, timeout_s: float = 600) -> None:
    deadline = time.monotonic() + timeout_s
    last: list[float] = []
    while time.monotonic() < deadline:
        described = await described_after_pause(admin, last)
        if (
            not isinstance(described, Exception)
            and len(described.partitions) == partitions
            and all(partition.leader >= 0 for partition in described.partitions)
        ):
            return
    raise TimeoutError("not every partition got a leader")


async def partition_epochs(admin: AdminClient) -> list[int]:
    described = (await admin.describe_topics([TOPIC]))[TOPIC]
    assert not isinstance(described, Exception)
    return [partition.partition_epoch for partition in described.partitions]


async def described_after_pause(
    admin: AdminClient, last: list[float], *, duty: float = 0.25
) -> TopicDescription | Exception:
    """The topic described, after a pause that keeps describing to `duty` of the time (at least
    50 ms): a description of 10,000 partitions costs its broker some 80 ms, and polling it every
    100 ms took most of a core of this 2-core machine from the cluster being measured. Timings
    that end on a description (crash detection) take a higher duty: the pause is their error."""
    if last:
        await asyncio.sleep(max(0.05, last[0] * (1 - duty) / duty))
    started = time.monotonic()
    described = (await admin.describe_topics([TOPIC]))[TOPIC]
    last[:] = [time.monotonic() - started]
    return described


async def all_in_sync(admin: AdminClient, timeout_s: float = 600, changed_since: list[int] | None = None) -> None:
    """Every ISR whole; with `changed_since` (partition epochs), only once each partition's state
    changed twice since (a restarted broker's new life leaves every ISR, then rejoins)."""
    deadline = time.monotonic() + timeout_s
    last: list[float] = []
    while time.monotonic() < deadline:
        described = await described_after_pause(admin, last)
        if (
            not isinstance(described, Exception)
            and all(len(p.isr) == 3 for p in described.partitions)
            and (
                changed_since is None
                or all(p.partition_epoch >= changed_since[p.partition] + 2 for p in described.partitions)
            )
        ):
            return
    raise TimeoutError("the ISRs did not become whole")


async def produce_everywhere(cluster: LocalCluster, partitions: int, per_partition: int) -> float:
    value = os.urandom(100)
    async with Producer(
        cluster.bootstrap, acks=1, batch_size=1024 * 1024, max_request_size=8 * 1024 * 1024
    ) as producer:
        started = time.perf_counter()
        deliveries = [
            await producer.send_batch(TOPIC, [value] * per_partition, partition=partition)
            for partition in range(partitions)
        ]
        for delivery in deliveries:
            await delivery
        return partitions * per_partition / (time.perf_counter() - started)


async def consume_everything(cluster: LocalCluster, partitions: int, expected: int) -> float:
    """Records/s of one consumer reading every partition from the start, timed once the records
    are readable (the produce was acks=1: each partition's high watermark waits for its
    followers, and timing from the produce's end measured replication's catch-up instead)."""
    async with Consumer(cluster.bootstrap, auto_offset_reset="earliest") as consumer:
        assigned = [TopicPartition(TOPIC, p) for p in range(partitions)]
        consumer.assign(assigned)
        deadline = time.monotonic() + 600
        while sum((await consumer.end_offsets(assigned)).values()) < expected:
            if time.monotonic() > deadline:
                raise TimeoutError("the records never became readable")
            await asyncio.sleep(0.2)
        await settled(cluster, "the consume")
        await consumer.seek_to_beginning()
        consumed = 0
        started = time.perf_counter()
        while consumed < expected:
            for fetched in (await consumer.poll_batches(2000)).values():
                for batch in fetched.batches:
                    consumed += sum(1 for offset in batch.offsets if offset >= fetched.start_offset)
        return consumed / (time.perf_counter() - started)


async def logged_at(
    cluster: LocalCluster, name: str, event: str, since: float, timeout_s: float = 60, **fields: object
) -> float:
    """The wall-clock time of the first `event` with `fields` that process `name` logged at or
    after `since` (time.time()): a moment inside a process, read without asking it anything.
    Waited for: another broker's Metadata can show every ISR whole before this process has been
    told so and logged it (the line then comes later, its time is still the moment it knew)."""
    deadline = time.monotonic() + timeout_s
    while True:
        for line in (cluster.data_dir / "logs" / f"{name}.log").read_text().splitlines():
            if f'"{event}"' not in line:
                continue
            entry = json.loads(line)
            at = datetime.datetime.fromisoformat(entry["timestamp"].replace("Z", "+00:00")).timestamp()
            if entry.get("event") == event and at >= since and all(entry.get(k) == v for k, v in fields.items()):
                return at
        if time.monotonic() > deadline:
            raise LookupError(f"{name} logged no {event} {fields} since {since} within {timeout_s} s")
        await asyncio.sleep(0.1)


async def crash_and_restart(cluster: LocalCluster, admin: AdminClient) -> dict[str, float]:
    """kill -9 of broker 3 (a crash: SIGTERM's controlled shutdown is bench_failover's), then start.
    Back in every ISR: the moment its metadata first shows no partition it hosts under-replicated
    (its `broker_in_sync` log line; polling Metadata for 10,000 partitions meanwhile would load the
    brokers being timed). Ready comes after: the leaderships it prefers handed back too."""
    await all_in_sync(admin)
    await settled(cluster, "the broker's kill")
    before = await partition_epochs(admin)
    stopped = time.monotonic()
    stopped_wall = time.time()
    cluster.signal("broker-3", signal.SIGKILL)
    await led_elsewhere(admin, 3)
    detected = time.monotonic() - stopped
    started_wall = time.time()
    cluster.start_process("broker-3")
    await cluster.wait_ready()  # its new life registered ...
    # ... and ready: it hosts every partition, so no ISR lacks it (its readiness file: cheap to poll)
    deadline = time.monotonic() + 600
    while not cluster.broker_ready(3):
        if time.monotonic() > deadline:
            raise TimeoutError("broker 3 never became ready")
        await asyncio.sleep(0.02)
    ready = time.monotonic()
    await all_in_sync(admin, changed_since=before)  # (confirmed: it left every ISR and rejoined them all)
    in_sync = await logged_at(cluster, "broker-3", "broker_in_sync", started_wall, in_sync=True)
    # The issue's own figure: kill -9 and start at once (a crashed container restarted by its
    # kubelet; bench_scale's first version did this), its new life registering while the
    # controller may still be moving the old one's leaderships.
    await all_in_sync(admin)
    await settled(cluster, "the broker's second kill")
    before = await partition_epochs(admin)
    at_once_wall = time.time()
    cluster.restart("broker-3", signal.SIGKILL)
    await cluster.wait_ready()
    await all_in_sync(admin, changed_since=before)
    at_once = await logged_at(cluster, "broker-3", "broker_in_sync", at_once_wall, in_sync=True) - at_once_wall
    return {
        "broker kill -9 → all it led led elsewhere (s)": detected,
        "broker kill -9, started at once → registered, in every ISR (s)": at_once,
        "broker kill -9 + start → registered, in every ISR (s)": in_sync - stopped_wall,
        # The same from the start alone: the figure above waits for the leaderships to move first
        # (the line before), where Kubernetes restarts a crashed container at once.
        "broker start → registered, in every ISR (s)": in_sync - started_wall,
        "broker kill -9 + start → ready, leaderships handed back (s)": ready - stopped,
    }


async def led_elsewhere(admin: AdminClient, broker: int, timeout_s: float = 600) -> None:
    """Every partition led by another broker than `broker`, which is in no ISR (crash detection:
    the controller confirmed the dead process and moved everything, well before its lease ends)."""
    deadline = time.monotonic() + timeout_s
    last: list[float] = []
    while time.monotonic() < deadline:
        described = await described_after_pause(admin, last, duty=0.5)
        if not isinstance(described, Exception) and all(
            p.leader not in (broker, -1) and broker not in p.isr for p in described.partitions
        ):
            return
    raise TimeoutError(f"broker {broker}'s leaderships did not move")


async def rolling_restart(cluster: LocalCluster, admin: AdminClient) -> dict[str, float]:
    """Every broker stopped (SIGTERM) and started in turn, the next only once the restarted one is
    ready (no partition it hosts under-replicated: what its pod's readiness probe tests), while a
    producer writes acks=all to an RF 3, min.insync.replicas 2 topic, one record in flight per
    partition. The longest any send waited for its acknowledgement, and the same over the steady
    second before as its reference. (Each send's own wait: the gap between any two
    acknowledgements, measured before, hid a partition stalled for seconds while the others went
    on.)"""
    await admin.create_topic(ROLLING_TOPIC, ROLLING_PARTITIONS, 3, {"min.insync.replicas": "2"})
    await settled(cluster, "the rolling restart")
    waits: list[tuple[float, float]] = []  # (sent, acknowledged) of each send
    failed = 0
    stop = asyncio.Event()
    async with Producer(cluster.bootstrap, acks="all", linger_ms=0, retry_backoff_ms=20) as producer:

        async def write(partition: int) -> None:
            nonlocal failed
            while not stop.is_set():
                sent = time.monotonic()
                try:
                    await (await producer.send(ROLLING_TOPIC, b"x", partition=partition))
                except Exception:
                    failed += 1
                waits.append((sent, time.monotonic()))

        writers = [asyncio.create_task(write(partition)) for partition in range(ROLLING_PARTITIONS)]
        try:
            await asyncio.sleep(2.0)  # writing under way
            steady_from = time.monotonic()
            await asyncio.sleep(1.0)
            started = time.monotonic()
            for broker in cluster.broker_ids:
                process = cluster.processes.pop(f"broker-{broker}")
                process.send_signal(signal.SIGTERM)  # a pod's grace period is the operator's: wait it out
                await asyncio.to_thread(process.wait, 600)
                cluster.start_broker(broker)
                deadline = time.monotonic() + 600
                while not cluster.broker_ready(broker):
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"broker {broker} never became ready")
                    await asyncio.sleep(0.05)
            finished = time.monotonic()
        finally:
            stop.set()
            await asyncio.gather(*writers)

    def longest(start: float, end: float) -> float:
        return max((acked - sent for sent, acked in waits if start <= sent <= end), default=end - start)

    return {
        "rolling restart, 3 brokers, each ready before the next (s)": finished - started,
        "rolling restart: longest wait for an acks=all ack (ms)": longest(started, finished) * 1000,
        "reference: the same over the steady second before (ms)": longest(steady_from, started) * 1000,
        "rolling restart: records whose send failed": failed,
    }


async def another_controller(admin: AdminClient, old: int, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):  # the dead one asked first: ask again
            if (await admin.describe_cluster()).controller_id not in (old, -1):
                return
        await asyncio.sleep(0.02)
    raise TimeoutError("no other controller became active")


async def every_partition_answers(cluster: LocalCluster, partitions: int, timeout_s: float = 600) -> None:
    async with Producer(cluster.bootstrap, acks=1, request_timeout_ms=5000) as producer:
        deliveries = [await producer.send(TOPIC, b"x", partition=p) for p in range(partitions)]
        await asyncio.wait_for(asyncio.gather(*(delivery for delivery in deliveries)), timeout_s)


def full_collections(cluster: LocalCluster) -> dict[str, float]:
    """The brokers' full (generation 2) garbage collections since they started (creation, produce
    and consume so far), from `tidelog_python_gc_pause_seconds`: each stops the broker's event
    loop (ADR 0028). The longest is a histogram bucket's upper bound."""
    counts, longest, total = [], 0.0, 0.0
    for broker in cluster.broker_ids:
        text = urllib.request.urlopen(cluster.metrics_endpoint(f"broker-{broker}"), timeout=10).read().decode()
        buckets = re.findall(r'tidelog_python_gc_pause_seconds_bucket\{generation="2",le="([^"]+)"[^}]*\} (\S+)', text)
        seen = 0.0
        for bound, count in buckets:  # cumulative: the last bucket that grew holds the longest
            if float(count) > seen:
                longest, seen = max(longest, float(bound)), float(count)  # ("+Inf": past 1 s)
        found = re.search(r'tidelog_python_gc_pause_seconds_count\{generation="2"[^}]*\} (\S+)', text)
        summed = re.search(r'tidelog_python_gc_pause_seconds_sum\{generation="2"[^}]*\} (\S+)', text)
        counts.append(float(found.group(1)) if found else 0.0)
        total += float(summed.group(1)) if summed else 0.0
    return {
        "full GC collections per broker so far, max": max(counts, default=0.0),
        "full GC pauses, mean (ms)": total / max(sum(counts), 1.0) * 1000,
        "full GC pause, longest at most (ms)": longest * 1000,
    }


def folders_reference(folder: Path, count: int, threads: int = 8) -> float:
    """Seconds this file system takes to make `count` folders holding what a new replica's log
    starts with (the folder, a segment file, the topic-id marker, the epoch checkpoint written to
    a temporary name and renamed) on `threads` threads: the floor under topic creation, which on
    a shared disk moves from run to run (0.3 s or 3.3 s for 1,000 partitions, same code)."""

    def make(names: range) -> None:
        for name in names:
            path = folder / f"reference-{name}"
            path.mkdir()
            (path / "00000000000000000000.log").touch()
            (path / "partition.metadata").write_bytes(b"topic_id: x\n")
            (path / "leader-epoch-checkpoint.tmp").write_bytes(b"0\n1\n0 0\n")
            (path / "leader-epoch-checkpoint.tmp").rename(path / "leader-epoch-checkpoint")

    step = max(1, count // threads)
    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        list(pool.map(make, [range(start, min(start + step, count)) for start in range(0, count, step)]))
    return time.monotonic() - started


class Shown(dict[str, float]):
    """Figures printed as they are measured: a run cut short (a stall at 10,000 partitions) still
    says what it measured before."""

    def __init__(self, partitions: int) -> None:
        super().__init__()
        self.partitions = partitions

    def __setitem__(self, name: str, value: float) -> None:
        super().__setitem__(name, value)
        print(f"  [{self.partitions:,d}] {name}: {value:,.1f}", flush=True)

    def update(self, *others: Any, **more: float) -> None:
        for name, value in dict(*others, **more).items():
            self[name] = value


async def data_path(cluster: LocalCluster, partitions: int, idle_seconds: float) -> dict[str, float]:
    """Produce to and consume from every partition, then the brokers' idle CPU with every
    partition holding records (what was written must cost nothing once written)."""
    figures = {}
    per_partition = max(1, 200_000 // partitions)
    figures["produce over all partitions (records/s)"] = await produce_everywhere(cluster, partitions, per_partition)
    figures["consume over all partitions (records/s)"] = await consume_everything(
        cluster, partitions, partitions * per_partition
    )
    figures.update(full_collections(cluster))
    await settled(cluster, "idle after writes")
    written = await idle_cpu(cluster, idle_seconds)
    figures["idle CPU per broker after writes, max (%)"] = max(written.values())
    return figures


async def measure(folder: Path, partitions: int, idle_seconds: float) -> dict[str, float]:
    figures = Shown(partitions)
    reference = folder / "reference"
    reference.mkdir(parents=True)
    figures["reference: folders for the replicas (s)"] = folders_reference(reference, partitions * 3)
    cluster = LocalCluster(folder, brokers=3, controllers=2, session_timeout_ms=6000, metrics=True)
    cluster.start()
    try:
        await cluster.wait_ready()
        empty = await idle_cpu(cluster, idle_seconds)
        figures["idle CPU, no partitions (%)"] = max(empty.values())
        async with AdminClient(
            cluster.bootstrap, controllers=cluster.controller_endpoints, request_timeout_ms=600_000
        ) as admin:
            started = time.monotonic()
            await admin.create_topic(TOPIC, partitions, 3)
            await all_led(admin, partitions)
            figures["topic creation (s)"] = time.monotonic() - started
            await all_in_sync(admin)
            await asyncio.sleep(idle_seconds)  # creation's after-work (first flushes, checkpoints) ends first
            idle = await idle_cpu(cluster, idle_seconds)
            figures["idle CPU per broker, max (%)"] = max(idle.values())
            figures["broker memory, max (MiB)"] = max(rss_mib(pid) for pid in broker_pids(cluster).values())
            slowest = 0.0
            for _ in range(20):
                asked = time.perf_counter()
                await admin.describe_topics([TOPIC])
                slowest = max(slowest, time.perf_counter() - asked)
            figures["slowest Metadata of 20 (ms)"] = slowest * 1000
            figures.update(await data_path(cluster, partitions, idle_seconds))
            await settled(cluster, "the reference pass")
            asked = time.monotonic()
            await every_partition_answers(cluster, partitions)  # the reference: what answering costs
            figures["every partition answers, no fault (s)"] = time.monotonic() - asked
            await settled(cluster, "the controller's kill")
            cluster_state = await admin.describe_cluster()
            active = f"controller-{cluster_state.controller_id}"
            killed = time.monotonic()
            cluster.signal(active, signal.SIGKILL)
            await another_controller(admin, cluster_state.controller_id)
            figures["controller kill -9 → another one active (s)"] = time.monotonic() - killed
            await every_partition_answers(cluster, partitions)
            figures["controller kill -9 → every partition answers (s)"] = time.monotonic() - killed
            cluster.start_process(active)
            figures.update(await crash_and_restart(cluster, admin))
            figures.update(await rolling_restart(cluster, admin))
    finally:
        figures.update(stop_everything(cluster))
    return figures


def stop_everything(cluster: LocalCluster) -> dict[str, float]:
    """SIGTERM to every process (LocalCluster.stop): seconds until all are gone, and how many
    brokers were still at it when the stop timeout killed them."""
    brokers = [process for name, process in cluster.processes.items() if name.startswith("broker")]
    stopping = time.monotonic()
    cluster.stop()
    return {
        "stop: SIGTERM to everything → all gone (s)": time.monotonic() - stopping,
        "brokers killed at the stop timeout": sum(process.returncode == -signal.SIGKILL for process in brokers),
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", default="100,1000", help="counts to measure, comma-separated")
    parser.add_argument("--idle-seconds", type=float, default=10.0)
    args = parser.parse_args()
    counts = [int(count) for count in args.partitions.split(",")]
    results = {}
    with tempfile.TemporaryDirectory(prefix="tidelog-bench-scale-") as folder:
        for count in counts:
            results[count] = await measure(Path(folder) / f"p{count}", count, args.idle_seconds)
    names = list(next(iter(results.values())))
    print("partitions (RF 3, 3 brokers)".ljust(48) + "".join(f"{count:>14,d}" for count in counts))
    for name in names:
        print(name.ljust(48) + "".join(f"{results[count][name]:>14,.1f}" for count in counts))
    print("targets at 10,000: creation <= 10 s, idle CPU <= 3 %, controller failover <= 2 s, Metadata <= 100 ms,")
    print("  stop <= 5 s (none killed), restart -> every ISR <= 5 s, consume >= 500,000/s, produce >= 300,000/s,")
    print("  rolling restart: no send failed, no wait above 100 ms")


if __name__ == "__main__":
    asyncio.run(main())
