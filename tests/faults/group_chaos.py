"""Consumer groups under churn (issue 39): member processes killed, closed and frozen, the group's
coordinator and the partitions' leaders killed, while records keep arriving — and the checker of
what the members wrote down.

Five worker processes (tests/faults/group_worker.py: commit-after-process, as Kafka's docs write
one) consume a 12-partition RF 3 topic fed continuously with acks=all. A seeded schedule applies
one fault at a time: kill -9 a member (a replacement starts; a static member's own identity
restarts within its session), SIGTERM one (it closes: commits, revokes, leaves), SIGSTOP one past
its session then SIGCONT (a zombie), kill -9 the coordinator owning the group, kill -9 a broker
leading some of the partitions (both restarted). After each, the run waits until every partition is
consumed again. Then every member closes, and the checker asserts:

- at-least-once: every acknowledged record was processed;
- a record processed twice is explained by a member's death (killed before it committed) or
  fencing (frozen past its session); none by a live member's refused commit, none after a commit
  that covered it was acknowledged, none unexplained;
- committed offsets, sampled all along, never go back, and end at the log end (lag 0);
- exclusive ownership in time: no member processes a partition after another member processed it
  in the same or a later generation (a woken zombie's first moments are counted apart: Kafka
  fences its commits, not its processing);
- a frozen member's commits with its old generation are refused after it wakes;
- static members killed or closed and restarted within their session get their partitions back in
  the same generation, with no rebalance;
- per fault, the time until every partition is processed again; under cooperative-sticky, the
  longest gap on a partition its member kept through a rebalance, against the gaps outside one.
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import contextlib
import dataclasses
import itertools
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.cluster.conftest import wait_until
from tidelog.client import AdminClient, GroupConsumer, Producer, TopicPartition
from tidelog.common.errors import TidelogError
from tidelog.dev.local_cluster import LocalCluster

TOPIC = "churn"
GROUP = "chaos"
PARTITIONS = 12
WORKERS = 5
REPO = Path(__file__).resolve().parents[2]
WORKER_KINDS = ("kill", "close", "freeze")
CLUSTER_KINDS = ("coordinator", "broker")
FENCING_ERRORS = {"UNKNOWN_MEMBER_ID", "ILLEGAL_GENERATION", "FENCED_INSTANCE_ID"}
REFUSALS = FENCING_ERRORS | {"REBALANCE_IN_PROGRESS"}
ZOMBIE_WINDOW_S = 2.0  # after SIGCONT, a woken member may still process what it held
RECOVERY_DEADLINE_S = 60.0


@dataclasses.dataclass(slots=True)
class Fault:
    kind: str
    at: float
    target: str
    healed_at: float = 0.0
    worker: int | None = None  # the worker process's index, for member faults
    led: frozenset[int] = frozenset()  # for a broker: the partitions it led when killed
    recovered_s: float = 0.0  # until every partition was processed again
    static_kept: bool | None = None  # for a static member restarted within its session


@dataclasses.dataclass(slots=True)
class Worker:
    index: int
    instance: str
    log: Path
    process: subprocess.Popen[bytes]
    identity: str  # who owns partitions: the static instance id, else the process

    @property
    def alive(self) -> bool:
        return self.process.poll() is None


@dataclasses.dataclass(slots=True)
class Report:
    mode: str
    seed: int
    acknowledged: int = 0
    processed: int = 0
    lost: list[str] = dataclasses.field(default_factory=list)
    duplicates: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    duplicate_examples: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    backwards: list[str] = dataclasses.field(default_factory=list)
    final_lag: dict[int, int] = dataclasses.field(default_factory=dict)
    overlaps: list[str] = dataclasses.field(default_factory=list)
    zombie_processing: int = 0
    zombie_commits_accepted: list[str] = dataclasses.field(default_factory=list)
    zombie_commits_refused: int = 0
    faults: list[Fault] = dataclasses.field(default_factory=list)
    kept_gaps: list[tuple[float, str]] = dataclasses.field(default_factory=list)  # (seconds, where), in a rebalance
    # Outside rebalances and faults, the time between two polls returning a partition's records.
    normal_raw_gaps: list[float] = dataclasses.field(default_factory=list)
    normal_gaps: list[float] = dataclasses.field(default_factory=list)  # no rebalance, no fault
    commits: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    rebalances: int = 0

    BAD = ("refused commit of a live member", "after its commit was acknowledged", "unexplained")

    @property
    def bad_duplicates(self) -> int:
        return sum(self.duplicates[kind] for kind in self.BAD)

    def gap_figures(self) -> tuple[float, float, float, float, float]:
        """In seconds: the p90 and the longest wait of a kept partition's readable records
        through a rebalance; outside rebalances, the normal (median) gap between polls returning
        a partition's records, and the p99 and longest wait of readable records."""
        kept = sorted(gap for gap, _ in self.kept_gaps) or [0.0]
        normal = sorted(self.normal_gaps) or [0.0]
        return (
            kept[min(len(kept) - 1, int(len(kept) * 0.9))],
            kept[-1],
            statistics.median(self.normal_raw_gaps or [0.0]),
            normal[min(len(normal) - 1, int(len(normal) * 0.99))],
            normal[-1],
        )

    def lines(self) -> list[str]:
        kept_p90, kept, normal_gap, p99, longest = self.gap_figures()
        lines = [
            f"group chaos, {self.mode}, seed {self.seed}: acknowledged {self.acknowledged}, processed "
            f"{self.processed}, lost {len(self.lost)}, duplicates {dict(self.duplicates) or 0}, "
            f"rebalances {self.rebalances}, commits {dict(self.commits)}",
            f"  committed offsets went back {len(self.backwards)}, final lag {sum(self.final_lag.values())}, "
            f"ownership overlaps {len(self.overlaps)}, zombie processing {self.zombie_processing}, "
            f"zombie commits refused {self.zombie_commits_refused} / accepted {len(self.zombie_commits_accepted)}",
        ]
        for fault in self.faults:
            extra = f" ({fault.at:.2f}-{fault.healed_at:.2f})"
            extra += "" if fault.static_kept is None else f", static member kept its partitions: {fault.static_kept}"
            lines.append(
                f"  {fault.kind:11s} {fault.target:14s} every partition consumed again after "
                f"{fault.recovered_s:.2f} s{extra}"
            )
        if self.kept_gaps:
            lines.append(
                f"  kept-partition gap through a rebalance: p90 {kept_p90:.3f} s, max {kept:.3f} s over "
                f"{len(self.kept_gaps)} gaps; "
                f"outside one: p99 {p99:.3f} s, max {longest:.3f} s; "
                f"normal gap between a partition's polls {normal_gap:.3f} s"
            )
        if self.kept_gaps:
            lines.append(f"  longest kept gaps: {sorted(self.kept_gaps, reverse=True)[:4]}")
        for kind, examples in self.duplicate_examples.items():
            if kind in self.BAD:
                lines.append(f"  {kind}: {examples[:5]}")
        return lines


class EventLogs:
    """The workers' JSON-lines logs, read incrementally, with the running state the run waits on
    kept as events arrive (a wait asks every 50 ms: it must not rescan the whole history)."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self._read: dict[Path, int] = {}
        self._worker_of: dict[Path, int] = {}
        self.last_processed: dict[int, float] = {}  # partition → when last processed, by anyone
        self.owned: dict[int, set[int]] = collections.defaultdict(set)  # worker → partitions
        self.joining: dict[int, bool] = {}  # worker → a rebalance under way, at its last poll

    def add(self, path: Path, worker: int) -> None:
        self._worker_of[path] = worker
        self._read.setdefault(path, 0)

    def refresh(self) -> list[dict[str, Any]]:
        new: list[dict[str, Any]] = []
        for path, done in self._read.items():
            if not path.exists():
                continue
            with path.open("rb") as file:
                file.seek(done)
                data = file.read()
            end = data.rfind(b"\n") + 1  # a line being written is read next time
            self._read[path] = done + end
            for line in data[:end].splitlines():
                event = json.loads(line)
                event["w"] = self._worker_of[path]
                new.append(event)
                self._follow(event)
        self.events.extend(new)
        return new

    def _follow(self, event: dict[str, Any]) -> None:
        worker, kind = event["w"], event["e"]
        if kind == "proc":
            self.last_processed[event["p"]] = max(self.last_processed.get(event["p"], 0.0), event["t"])
        elif kind == "assigned":
            self.owned[worker] |= set(event["parts"])
        elif kind in ("revoked", "lost"):
            self.owned[worker] -= set(event["parts"])
        elif kind == "poll":
            self.joining[worker] = event["joining"]


class GroupChaos:
    def __init__(self, cluster: LocalCluster, work_dir: Path, mode: str, seed: int, rounds: int) -> None:
        self.cluster = cluster
        self.work_dir = work_dir
        self.mode = mode  # "range", "cooperative-sticky" or "static" (cooperative-sticky, static members)
        self.static = mode == "static"
        self.strategy = "range" if mode == "range" else "cooperative-sticky"
        self.session_ms = 6000 if self.static else 4000
        self.random = random.Random(seed)
        self.seed = seed
        kinds = list(WORKER_KINDS) + ([] if self.static else list(CLUSTER_KINDS))
        self.schedule = [kind for _ in range(rounds) for kind in self.random.sample(kinds, len(kinds))]
        self.workers: dict[int, Worker] = {}
        self.slots: dict[int, Worker] = {}  # slot (0..WORKERS-1) → its current worker
        self.logs = EventLogs()
        # p → (base offset, count, acknowledged at) of each batch acknowledged
        self.acknowledged: dict[int, list[tuple[int, int, float]]] = collections.defaultdict(list)
        self.observed: dict[int, list[tuple[float, int]]] = collections.defaultdict(list)  # p → (t, committed)
        self.report = Report(mode, seed)
        self._stop = asyncio.Event()

    # ---- processes ---------------------------------------------------------------------------

    def _start_worker(self, slot: int) -> Worker:
        index = len(self.workers)
        instance = f"member-{slot}" if self.static else ""
        log = self.work_dir / f"worker-{index}.jsonl"
        command = [
            sys.executable,
            "-m",
            "tests.faults.group_worker",
            "--bootstrap",
            ",".join(self.cluster.bootstrap),
            "--group",
            GROUP,
            "--topic",
            TOPIC,
            "--log",
            str(log),
            "--strategy",
            self.strategy,
            "--session-timeout-ms",
            str(self.session_ms),
            *(["--instance-id", instance] if instance else []),
        ]
        environment = {**os.environ, "PYTHONPATH": str(REPO)}
        with (self.work_dir / f"worker-{index}.out").open("wb") as output:
            process = subprocess.Popen(command, cwd=REPO, env=environment, stdout=output, stderr=subprocess.STDOUT)
        worker = Worker(index, instance, log, process, instance or f"process-{index}")
        self.workers[index] = worker
        self.slots[slot] = worker
        self.logs.add(log, index)
        return worker

    def _check_workers(self) -> None:
        for worker in self.slots.values():
            code = worker.process.poll()
            if code is not None:
                output = (self.work_dir / f"worker-{worker.index}.out").read_text(errors="replace")[-3000:]
                raise AssertionError(f"worker-{worker.index} exited by itself ({code}):\n{output}")

    def _stop_workers(self) -> None:
        for worker in self.workers.values():
            if worker.alive:
                with contextlib.suppress(ProcessLookupError):
                    worker.process.send_signal(signal.SIGCONT)
                    worker.process.send_signal(signal.SIGTERM)
        for worker in self.workers.values():
            try:
                worker.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                worker.process.kill()
                worker.process.wait()

    # ---- load and observation ----------------------------------------------------------------

    async def _feed(self) -> None:
        number = 0
        async with Producer(self.cluster.bootstrap, acks="all", linger_ms=5, request_timeout_ms=5000) as producer:
            while not self._stop.is_set():
                deliveries = []
                for partition in range(PARTITIONS):
                    values = [b"%09d" % (number + n) for n in range(4)]
                    number += len(values)
                    deliveries.append(await producer.send_batch(TOPIC, values, partition=partition))
                for delivery in deliveries:
                    for partition, base, count in await delivery.settled():
                        if isinstance(base, int):  # a failed delivery is not acknowledged
                            self.acknowledged[partition].append((base, count, time.monotonic()))
                await asyncio.sleep(0.03)

    async def _observe(self, reader: GroupConsumer) -> None:
        partitions = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        while not self._stop.is_set():
            with contextlib.suppress(TidelogError, ConnectionError, TimeoutError):
                asked = time.monotonic()
                for tp, offset in (await reader.committed(partitions)).items():
                    if offset is not None:
                        self.observed[tp.partition].append((asked, offset))
            await asyncio.sleep(0.1)

    def _processed_after(self, since: float) -> set[int]:
        self.logs.refresh()
        return {partition for partition, at in self.logs.last_processed.items() if at > since}

    async def _all_consumed_since(self, since: float) -> float:
        """Seconds from `since` until every partition was processed after it."""

        async def everywhere() -> bool:
            self._check_workers()
            return len(self._processed_after(since)) == PARTITIONS

        await wait_until(everywhere, timeout_s=RECOVERY_DEADLINE_S, what="every partition processed again")
        first: dict[int, float] = {}
        for event in self.logs.events:
            if event["e"] == "proc" and event["t"] > since:
                first[event["p"]] = min(first.get(event["p"], event["t"]), event["t"])
        return max(first.values()) - since

    async def _quiet(self) -> None:
        """Until every partition has been processed for a while after the last fault: the group is
        settled before the next one, and normal gaps are sampled."""
        since = time.monotonic()
        await self._all_consumed_since(since)

        async def a_second_more() -> bool:
            return (
                time.monotonic() - since > 1.5
                and len(self._processed_after(since + 1.0)) == PARTITIONS
                and self._settled()
            )

        await wait_until(a_second_more, timeout_s=RECOVERY_DEADLINE_S, what="a settled group")

    def _settled(self) -> bool:
        """Every current member owns some partitions, each partition one owner, nobody joining."""
        current = [worker.index for worker in self.slots.values()]
        holdings = [self.logs.owned[index] for index in current]
        return (
            all(holdings)
            and not any(self.logs.joining.get(index, True) for index in current)
            and sum(map(len, holdings)) == len(set().union(*holdings)) == PARTITIONS
        )

    # ---- faults ------------------------------------------------------------------------------

    async def _apply(self, kind: str, admin: AdminClient, reader: GroupConsumer) -> Fault:
        if kind in WORKER_KINDS:
            slot = self.random.randrange(WORKERS)
            worker = self.slots[slot]
            fault = Fault(kind, time.monotonic(), f"worker-{worker.index}", worker=worker.index)
            if kind == "freeze":
                worker.process.send_signal(signal.SIGSTOP)
                await asyncio.sleep(self.session_ms / 1000 + 2.0)  # the fault itself: frozen past its session
                worker.process.send_signal(signal.SIGCONT)
            else:
                worker.process.send_signal(signal.SIGKILL if kind == "kill" else signal.SIGTERM)
                await asyncio.to_thread(worker.process.wait, 30)
                await asyncio.sleep(0.3)  # a restart, as a supervisor would
                self._start_worker(slot)
            fault.healed_at = time.monotonic()
            return fault
        if kind == "coordinator":
            await reader.committed([TopicPartition(TOPIC, 0)])
            owner = f"coordinator-{self.cluster.coordinator_endpoints.index(reader.link.endpoint) + 1}"
            fault = Fault(kind, time.monotonic(), owner)
            self.cluster.signal(owner, signal.SIGKILL)
            await asyncio.sleep(1.0)
            self.cluster.start_process(owner)
            fault.healed_at = time.monotonic()
            return fault
        described = (await admin.describe_topics([TOPIC]))[TOPIC]
        assert not isinstance(described, Exception)
        leaders: dict[int, set[int]] = collections.defaultdict(set)
        for partition in described.partitions:
            leaders[int(partition.leader)].add(partition.partition)
        broker = self.random.choice(sorted(b for b in leaders if b >= 0))
        fault = Fault(kind, time.monotonic(), f"broker-{broker}", led=frozenset(leaders[broker]))
        self.cluster.signal(f"broker-{broker}", signal.SIGKILL)
        await asyncio.sleep(1.0)
        self.cluster.start_process(f"broker-{broker}")
        fault.healed_at = time.monotonic()
        return fault

    # ---- the run -----------------------------------------------------------------------------

    async def run(self) -> Report:
        async with AdminClient(self.cluster.bootstrap, controllers=self.cluster.controller_endpoints) as admin:
            await admin.create_topic(TOPIC, PARTITIONS, 3, {"min.insync.replicas": "2"})
            reader = GroupConsumer(self.cluster.bootstrap, GROUP, enable_auto_commit=False, request_timeout_ms=4000)
            tasks = [asyncio.create_task(self._feed()), asyncio.create_task(self._observe(reader))]
            try:
                for slot in range(WORKERS):
                    self._start_worker(slot)
                await self._quiet()
                for kind in self.schedule:
                    fault = await self._apply(kind, admin, reader)
                    fault.recovered_s = await self._all_consumed_since(fault.at)
                    self.report.faults.append(fault)
                    await self._quiet()
                self._stop.set()
                await asyncio.gather(*tasks)
                await asyncio.to_thread(self._stop_workers)
                self.logs.refresh()
                partitions = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
                final = await reader.committed(partitions)
                ends = await reader.end_offsets(partitions)
                self.report.final_lag = {tp.partition: ends[tp] - (final[tp] or 0) for tp in partitions}
            finally:
                self._stop.set()
                for task in tasks:
                    task.cancel()
                    with contextlib.suppress(BaseException):
                        await task
                await asyncio.to_thread(self._stop_workers)
                await reader.close()
        check(self, self.report)
        return self.report


# ---- the checker ----------------------------------------------------------------------------


def check(run: GroupChaos, report: Report) -> None:
    events = sorted(run.logs.events, key=lambda event: event.get("t", 0.0))
    identity = {index: worker.identity for index, worker in run.workers.items()}
    faults_of: dict[int, list[Fault]] = collections.defaultdict(list)
    for fault in report.faults:
        if fault.worker is not None:
            faults_of[fault.worker].append(fault)
    procs = [event for event in events if event["e"] == "proc"]
    commits = [event for event in events if event["e"] == "commit"]
    for commit in commits:
        report.commits["acknowledged" if commit["ok"] else commit["error"] or "failed"] += 1
    report.rebalances = len({event["gen"] for event in procs})
    for event in procs:
        assert event["n"] == event["last"] - event["first"] + 1, event  # a plain topic: no offset gaps

    # at-least-once, and every duplicate explained
    report.acknowledged = sum(count for batches in run.acknowledged.values() for _, count, _ in batches)
    handled: dict[tuple[int, int], list[dict[str, Any]]] = collections.defaultdict(list)
    for event in procs:
        for offset in range(event["first"], event["last"] + 1):
            handled[(event["p"], offset)].append(event)
    report.processed = len(handled)
    for partition, batches in run.acknowledged.items():
        for base, count, _ in batches:
            for offset in range(base, base + count):
                if (partition, offset) not in handled:
                    report.lost.append(f"{partition}@{offset}")
    acked_commits: dict[int, list[dict[str, Any]]] = collections.defaultdict(list)  # worker → its acknowledged
    refused: dict[int, list[dict[str, Any]]] = collections.defaultdict(list)
    for commit in commits:
        (acked_commits if commit["ok"] else refused)[commit["w"]].append(commit)
    for (partition, offset), seen in handled.items():
        for first, again in itertools.pairwise(seen):
            kind = _explain(partition, offset, first, again, acked_commits, refused, faults_of, report.faults)
            report.duplicates[kind] += 1
            report.duplicate_examples.setdefault(kind, []).append(
                f"{partition}@{offset}: worker-{first['w']} gen {first['gen']} at {first['t']:.2f}, "
                f"again worker-{again['w']} gen {again['gen']} at {again['t']:.2f}"
            )

    # committed offsets never go back
    for partition, values in run.observed.items():
        report.backwards.extend(
            f"{partition}: {a} → {b} at {t:.2f}" for (_, a), (t, b) in itertools.pairwise(values) if b < a
        )

    # exclusive ownership in time, zombies apart
    thawed = {fault.worker: fault.healed_at for fault in report.faults if fault.kind == "freeze"}
    newest: dict[int, dict[str, tuple[int, float]]] = collections.defaultdict(dict)  # p → identity → (gen, t)
    for event in procs:
        who = identity[event["w"]]
        others = [(gen, t, owner) for owner, (gen, t) in newest[event["p"]].items() if owner != who]
        late = [(gen, t, owner) for gen, t, owner in others if gen >= event["gen"]]
        if late:
            woke = thawed.get(event["w"])
            if woke is not None and woke <= event["t"] <= woke + ZOMBIE_WINDOW_S:
                report.zombie_processing += 1
            else:
                gen, t, owner = max(late)
                report.overlaps.append(
                    f"partition {event['p']}: {who} (gen {event['gen']}) at {event['t']:.2f} after {owner} "
                    f"(gen {gen}) at {t:.2f}"
                )
        previous = newest[event["p"]].get(who)
        if previous is None or event["gen"] >= previous[0]:
            newest[event["p"]][who] = (event["gen"], event["t"])

    # a frozen member's commits under its old generation are refused once it wakes
    for fault in report.faults:
        if fault.kind != "freeze":
            continue
        before = [e["gen"] for e in procs if e["w"] == fault.worker and e["t"] < fault.at]
        if not before:
            continue
        for commit in commits:
            if commit["w"] == fault.worker and commit["t0"] >= fault.healed_at and commit["gen"] == before[-1]:
                if commit["ok"]:
                    report.zombie_commits_accepted.append(f"worker-{fault.worker}: {commit['offsets']}")
                else:
                    report.zombie_commits_refused += 1

    # static members restarted within their session: their partitions back, no rebalance
    if run.static:
        for fault in report.faults:
            if fault.kind in ("kill", "close") and fault.worker is not None:
                fault.static_kept = _static_kept(events, fault, run)

    if run.strategy == "cooperative-sticky":
        _gaps(events, report, run.acknowledged)


def _explain(  # noqa: PLR0917 - one duplicate and the whole history it is judged against
    partition: int,
    offset: int,
    first: dict[str, Any],
    again: dict[str, Any],
    acked_commits: dict[int, list[dict[str, Any]]],
    refused: dict[int, list[dict[str, Any]]],
    faults_of: dict[int, list[Fault]],
    faults: list[Fault],
) -> str:
    key = str(partition)
    worker = first["w"]
    for fault in faults_of[again["w"]]:  # a woken zombie processing what it held or had fetched
        if fault.kind == "freeze" and fault.healed_at <= again["t"] <= fault.healed_at + ZOMBIE_WINDOW_S:
            return "member frozen past its session (fenced)"
    if any(
        c["t"] <= again["t"] and c["offsets"].get(key, -1) > offset and c["t0"] >= first["t"]
        for c in acked_commits[worker]
    ):
        return "after its commit was acknowledged"
    for fault in faults_of[worker]:
        if fault.kind == "kill" and first["t"] <= fault.at <= again["t"]:
            return "member killed before committing"
        if fault.kind == "freeze" and first["t"] <= fault.healed_at and fault.at <= again["t"]:
            return "member frozen past its session (fenced)"
    if any(
        c["error"] in REFUSALS and first["t"] <= c["t0"] <= again["t"] and key in c["offsets"] for c in refused[worker]
    ):
        return "refused commit of a live member"
    if any(f.kind in CLUSTER_KINDS and f.at <= again["t"] and first["t"] <= f.healed_at + 10 for f in faults):
        return "coordinator or broker killed before it committed"
    return "unexplained"


def _static_kept(events: list[dict[str, Any]], fault: Fault, run: GroupChaos) -> bool:
    """The restarted identity's first assignment equals what the old process held, in the same generation."""
    old = fault.worker
    assert old is not None
    instance = run.workers[old].instance
    held: set[int] = set()
    generation = None
    for event in events:
        if event["w"] == old and event["e"] in ("assigned", "revoked", "lost") and event["t"] < fault.at:
            parts = set(event["parts"])
            held = held | parts if event["e"] == "assigned" else held - parts
            generation = event["gen"]
    successor = next(
        (w for w in run.workers.values() if w.instance == instance and w.index > old),
        None,
    )
    if successor is None:
        return False
    first = next((e for e in events if e["w"] == successor.index and e["e"] == "assigned"), None)
    return first is not None and set(first["parts"]) == held and first["gen"] == generation


def _gaps(events: list[dict[str, Any]], report: Report, acknowledged: dict[int, list[tuple[int, int, float]]]) -> None:
    """Gaps between two polls of one member that both returned records of a partition it kept,
    counted from when the second poll's first record was there to read (acknowledged): a pause
    of the producer is no gap of the consumer's."""
    bases = {p: [base for base, _, _ in sorted(batches)] for p, batches in acknowledged.items()}
    acked_at = {p: [at for _, _, at in sorted(batches)] for p, batches in acknowledged.items()}

    def readable_since(partition: int, offset: int) -> float:
        index = bisect.bisect_right(bases.get(partition, []), offset) - 1
        return acked_at[partition][index] if index >= 0 else 0.0

    joining: dict[int, list[tuple[float, float]]] = collections.defaultdict(list)
    started: dict[int, float] = {}
    for event in events:
        if event["e"] == "poll":
            if event["joining"]:
                started[event["w"]] = event["t"]
            elif event["w"] in started:
                joining[event["w"]].append((started.pop(event["w"]), event["t"]))
        if event["e"] == "start":
            started[event["w"]] = event["t"]  # a new member joins from its start
    last: dict[tuple[int, int], float] = {}
    for event in events:
        worker = event["w"]
        if event["e"] in ("revoked", "lost"):
            for partition in event["parts"]:
                last.pop((worker, partition), None)
            continue
        if event["e"] != "proc":
            continue
        key = (worker, event["p"])
        before = last.get(key)
        last[key] = event["t"]
        if before is None or before == event["t"]:
            continue  # the first, or another run of the same poll
        raw = event["t"] - before
        gap = (max(before, readable_since(event["p"], event["first"])), event["t"])
        if gap[1] <= gap[0]:
            continue
        if any(
            f.at < gap[1]
            and gap[0] < f.healed_at + 1.0
            and (f.worker == worker or (f.kind == "broker" and event["p"] in f.led))
            for f in report.faults
        ):
            continue  # this member frozen, or its partition's leader down: not the rebalance's doing
        if any(start < gap[1] and gap[0] < end for start, end in joining[worker]):
            report.kept_gaps.append((gap[1] - gap[0], f"worker-{worker} p{event['p']} {gap[0]:.2f}"))
        elif not any(f.at < gap[1] and gap[0] < f.healed_at + 1.0 for f in report.faults):
            report.normal_gaps.append(gap[1] - gap[0])
            report.normal_raw_gaps.append(raw)
