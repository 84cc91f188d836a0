"""The exactly-once Spark sink (issue 34): a streaming copy whose driver is SIGKILLed in the middle
of micro-batches and started again from its checkpoint; a read_committed reader of the target finds
every input exactly once."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.conftest import COORDINATOR_ARGS, running_cluster, wait_until
from tidelog.client import AdminClient, Consumer, Producer, TopicPartition
from tidelog.dev.local_cluster import LocalCluster

DRIVER = Path(__file__).with_name("exactly_once_driver.py")
INPUTS = 240
PARTITIONS = 2
KILLS = int(os.environ.get("TIDELOG_EOS_KILLS", "2"))


@pytest.fixture(scope="module")
def eos_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with running_cluster(
        Path(tmp_path_factory.mktemp("eos")),
        brokers=1,
        controllers=1,
        coordinators=1,
        coordinator_args=COORDINATOR_ARGS,
    ) as cluster:
        yield cluster


async def _ends(cluster: LocalCluster, topic: str) -> tuple[int, int]:
    """(sum of high watermarks, sum of last stable offsets) over the topic's partitions."""
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    sums = []
    for isolation in ("read_uncommitted", "read_committed"):
        async with Consumer(cluster.bootstrap, isolation_level=isolation) as consumer:
            sums.append(sum((await consumer.end_offsets(tps)).values()))
    return sums[0], sums[1]


async def _committed_values(cluster: LocalCluster, topic: str, isolation: str = "read_committed") -> list[bytes]:
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    values: list[bytes] = []
    async with Consumer(cluster.bootstrap, isolation_level=isolation, auto_offset_reset="earliest") as consumer:
        ends = await consumer.end_offsets(tps)
        consumer.assign(tps)

        async def read() -> bool:
            values.extend(record.value or b"" for record in await consumer.poll(300))
            return all([await consumer.position(tp) >= ends[tp] for tp in tps])

        await wait_until(read, what=f"{topic} read to its last stable offset")
    return values


def test_the_exactly_once_sink_copies_every_input_once_across_driver_kills(
    eos_cluster: LocalCluster, tmp_path: Path
) -> None:
    source, target = "eos-in", "eos-out"
    bootstrap = ",".join(eos_cluster.bootstrap)

    async def fill() -> None:
        async with AdminClient(eos_cluster.bootstrap, controllers=eos_cluster.controller_endpoints) as admin:
            for topic in (source, target):
                await admin.create_topic(topic, PARTITIONS, 1)
        async with Producer(eos_cluster.bootstrap) as producer:
            for number in range(INPUTS):
                await producer.send(source, b"r%04d" % number, partition=number % PARTITIONS)

    asyncio.run(fill())
    kills = 0
    for run in range(KILLS + 1):
        driver = subprocess.Popen(
            [sys.executable, str(DRIVER), bootstrap, source, target, str(tmp_path / "checkpoint")],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            if run < KILLS:
                _, before = asyncio.run(_ends(eos_cluster, target))

                async def mid_batch(before: int = before) -> bool:
                    written, stable = await _ends(eos_cluster, target)
                    # some batches committed in this run, and one written and not yet committed
                    return stable > before and written > stable

                asyncio.run(wait_until(mid_batch, timeout_s=120, what="a micro-batch written and not committed"))
                driver.send_signal(signal.SIGKILL)
                kills += 1
            else:

                async def everything() -> bool:
                    return len(await _committed_values(eos_cluster, target)) >= INPUTS

                asyncio.run(wait_until(everything, timeout_s=180, what="every input copied"))
        finally:
            driver.kill()
            output, _ = driver.communicate(timeout=30)
        assert "failed" not in output, output[-3000:]
    values = asyncio.run(_committed_values(eos_cluster, target))
    assert kills == KILLS
    assert sorted(values) == [b"r%04d" % number for number in range(INPUTS)]  # each once, none lost
    # The killed runs' rows written and never committed are in the log, aborted: the kills hit mid-batch.
    assert len(asyncio.run(_committed_values(eos_cluster, target, "read_uncommitted"))) > INPUTS
