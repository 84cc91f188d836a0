"""Metrics scrape benchmark: how long Prometheus waits for /metrics of a broker holding many
partitions, and of the active controller describing them all.

    .venv/bin/python bench/bench_metrics_scrape.py [--partitions 1000] [--scrapes 50]

Starts etcd, one controller and one broker (tidelog.dev.local_cluster) with metrics on, creates a topic
of `--partitions` partitions (RF 1) and writes one batch to each, then times `--scrapes` GETs of each
process's /metrics (the full exposition, as Prometheus reads it) and counts its series. Issue 15's
target: a broker with 1,000 partitions answers in under 50 ms.

Reference printed in the same run: the same GET against a prometheus_client HTTP server in this
process exposing only the default process and Python collectors, the cost of the HTTP round trip
and exposition machinery with nothing of ours in it.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import urllib.request
from pathlib import Path

from prometheus_client import start_http_server

from tidelog.client import AdminClient, Producer
from tidelog.dev.etcd_server import free_port
from tidelog.dev.local_cluster import LocalCluster


def _scrape(url: str) -> tuple[float, int]:
    started = time.perf_counter()
    with urllib.request.urlopen(url, timeout=10) as answer:
        body = answer.read()
    elapsed = time.perf_counter() - started
    series = sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))
    return elapsed, series


def _timed(url: str, scrapes: int) -> tuple[float, float, int]:
    _scrape(url)  # warm: connection setup, first collection
    times = []
    series = 0
    for _ in range(scrapes):
        elapsed, series = _scrape(url)
        times.append(elapsed)
    return statistics.median(times), max(times), series


async def run(partitions: int, scrapes: int) -> None:
    port = free_port()
    start_http_server(port, addr="127.0.0.1")
    reference = _timed(f"http://127.0.0.1:{port}/metrics", scrapes)
    print(
        f"reference: bare prometheus_client exposition in this process: p50 {reference[0] * 1000:.2f} ms, "
        f"max {reference[1] * 1000:.2f} ms, {reference[2]} series"
    )
    with tempfile.TemporaryDirectory() as folder:
        cluster = LocalCluster(Path(folder) / "cluster", brokers=1, controllers=1, metrics=True)
        cluster.start()
        try:
            await cluster.wait_ready()
            async with AdminClient(cluster.bootstrap, controllers=cluster.controller_endpoints) as admin:
                started = time.monotonic()
                await admin.create_topic("scrape", partitions, 1)

                async def led() -> bool:
                    found = (await admin.describe_topics(["scrape"]))["scrape"]
                    return not isinstance(found, Exception) and all(p.leader >= 0 for p in found.partitions)

                while not await led():
                    if time.monotonic() - started > 120:
                        raise TimeoutError("leaders not elected")
                    await asyncio.sleep(0.2)
            async with Producer(cluster.bootstrap) as producer:
                deliveries = [await producer.send("scrape", b"x", partition=p) for p in range(partitions)]
                for delivery in deliveries:
                    await delivery
            for name in ("broker-1", "controller-1"):
                p50, worst, series = await asyncio.to_thread(_timed, cluster.metrics_endpoint(name), scrapes)
                print(
                    f"{name} with {partitions} partitions: p50 {p50 * 1000:.1f} ms, max {worst * 1000:.1f} ms, "
                    f"{series} series; {p50 / reference[0]:.1f}× the reference"
                    + ("; target < 50 ms" if name.startswith("broker") else "")
                )
        finally:
            cluster.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--scrapes", type=int, default=50)
    args = parser.parse_args()
    asyncio.run(run(args.partitions, args.scrapes))


if __name__ == "__main__":
    main()
