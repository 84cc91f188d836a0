"""One member of the group chaos test (tests/faults/group_chaos.py), run as its own process:

    python -m tests.faults.group_worker --bootstrap H:P,... --group G --topic T --log FILE
        [--strategy range|cooperative-sticky] [--instance-id ID] [--session-timeout-ms MS]

A commit-after-process service as Kafka's documentation writes one: poll, "process" (write what
was polled to its log and fsync), then commit what it processed — asynchronously in the loop, one
commit in flight at a time, synchronously in `on_partitions_revoked` and on close (SIGTERM). Every
step goes to the log as one JSON line with `time.monotonic()` (one clock for every process on the
machine), for the checker:

    {"e": "start", "t", "pid", "instance"}
    {"e": "proc", "t", "p", "first", "last", "n", "gen", "member"}  n records first..last of p
    {"e": "commit", "t0", "t", "offsets": {p: next}, "gen", "ok", "error"}
    {"e": "assigned" | "revoked" | "lost", "t", "parts", "gen"}
    {"e": "poll", "t", "joining", "gen"}                              only when `joining` changes
    {"e": "fatal", "t", "error"} / {"e": "closed", "t"}
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from typing import IO, Any

from tidelog.client import GroupConsumer, TopicPartition
from tidelog.common.errors import TidelogError

FENCED_EXIT = 3  # the process stops: its static identity was taken (Kafka: FencedInstanceIdException)


class Worker:
    def __init__(self, args: argparse.Namespace, log: IO[str]) -> None:
        self.args = args
        self.log = log
        self.consumer = GroupConsumer(
            args.bootstrap.split(","),
            args.group,
            group_instance_id=args.instance_id,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            session_timeout_ms=args.session_timeout_ms,
            heartbeat_interval_ms=max(args.session_timeout_ms // 10, 100),
            max_poll_interval_ms=20_000,  # also the rebalance timeout: a stuck rebalance ends
            request_timeout_ms=4000,
            max_poll_records=200,
            partition_assignment_strategy=[args.strategy],
        )
        self.stop = asyncio.Event()
        self.in_flight: asyncio.Task[None] | None = None
        self.joining: bool | None = None  # the first poll is always written down

    def write(self, event: dict[str, Any]) -> None:
        self.log.write(json.dumps(event, separators=(",", ":")) + "\n")
        self.log.flush()
        os.fsync(self.log.fileno())

    async def commit(self, offsets: dict[TopicPartition, int]) -> None:
        if not offsets:
            return
        generation, started = self.consumer.generation_id, time.monotonic()
        error = ""
        try:
            await self.consumer.commit(offsets)
        except TidelogError as failure:
            error = failure.code.name
        except (ConnectionError, OSError, TimeoutError) as failure:
            error = type(failure).__name__
        self.write(
            {
                "e": "commit",
                "t0": started,
                "t": time.monotonic(),
                "offsets": {str(tp.partition): offset for tp, offset in offsets.items()},
                "gen": generation,
                "ok": not error,
                "error": error,
            }
        )

    async def settle_commit(self) -> None:
        if self.in_flight is not None:
            with contextlib.suppress(Exception):
                await self.in_flight
            self.in_flight = None

    # the rebalance listener: commit what was processed before a partition moves
    async def on_partitions_revoked(self, partitions: set[TopicPartition]) -> None:
        await self.settle_commit()
        positions = self.consumer._positions()
        await self.commit({tp: positions[tp] for tp in partitions if tp in positions})
        self.event("revoked", partitions)

    async def on_partitions_assigned(self, partitions: set[TopicPartition]) -> None:
        self.event("assigned", partitions)

    async def on_partitions_lost(self, partitions: set[TopicPartition]) -> None:
        self.event("lost", partitions)

    def event(self, kind: str, partitions: set[TopicPartition]) -> None:
        self.write(
            {
                "e": kind,
                "t": time.monotonic(),
                "parts": sorted(tp.partition for tp in partitions),
                "gen": self.consumer.generation_id,
            }
        )

    async def run(self) -> None:
        self.write({"e": "start", "t": time.monotonic(), "pid": os.getpid(), "instance": self.args.instance_id})
        self.consumer.subscribe([self.args.topic], listener=self)
        try:
            while not self.stop.is_set():
                try:
                    runs = await self.consumer.poll_runs(100)
                except TidelogError as error:
                    if error.code.name == "FENCED_INSTANCE_ID":
                        self.write({"e": "fatal", "t": time.monotonic(), "error": error.code.name})
                        raise SystemExit(FENCED_EXIT) from error
                    await asyncio.sleep(0.05)
                    continue
                joining = self.consumer._join_task is not None
                if joining != self.joining:
                    self.joining = joining
                    self.write(
                        {"e": "poll", "t": time.monotonic(), "joining": joining, "gen": self.consumer.generation_id}
                    )
                if not runs:
                    continue
                now, generation, member = time.monotonic(), self.consumer.generation_id, self.consumer.member_id
                for run in runs:  # "process": written down and on disk before the commit
                    self.log.write(
                        json.dumps(
                            {
                                "e": "proc",
                                "t": now,
                                "p": run.partition.partition,
                                "first": run.offsets[0],
                                "last": run.offsets[-1],
                                "n": len(run),
                                "gen": generation,
                                "member": member,
                            },
                            separators=(",", ":"),
                        )
                        + "\n"
                    )
                self.log.flush()
                os.fsync(self.log.fileno())
                if self.in_flight is None or self.in_flight.done():
                    self.in_flight = asyncio.create_task(self.commit(self.consumer._positions()))
            await self.settle_commit()
            await self.consumer.close()  # revokes everything owned: on_partitions_revoked commits
            self.write({"e": "closed", "t": time.monotonic()})
        finally:
            with contextlib.suppress(Exception):
                await self.consumer.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--strategy", default="range")
    parser.add_argument("--instance-id", default="")
    parser.add_argument("--session-timeout-ms", type=int, default=4000)
    args = parser.parse_args(argv)

    async def run() -> None:
        with open(args.log, "a", encoding="utf-8") as log:
            worker = Worker(args, log)
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, worker.stop.set)
            await worker.run()

    asyncio.run(run())
    sys.exit(0)


if __name__ == "__main__":
    main()
