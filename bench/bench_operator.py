"""Operator benchmark: from applying a Topic resource to `Ready=True`.

    .venv/bin/python bench/bench_operator.py [--single 10] [--burst 200]

Starts a local cluster (etcd, 2 controllers, 3 brokers), kmock's Kubernetes emulator and the
operator as a real kopf process. Then:
- single: one Topic applied at a time (3 partitions, RF 3), the time until its status says Ready;
- burst: `--burst` Topics applied at once, the time until every one of them is Ready.
Issue 14's targets: single ≤ 2 s, 200 at once ≤ 30 s.

Reference printed in the same run: creating the same topic directly with the AdminClient and
waiting until its metadata shows every partition with a leader — what the operator's path costs
at the least; the ratio is what the Kubernetes API, kopf and the operator add.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from tidelog.client import AdminClient
from tidelog.dev.kube_emulator import write_kubeconfig
from tidelog.dev.local_cluster import LocalCluster

API = "/apis/tidelog.io/v1beta1/namespaces/default/topics"
SPEC: dict[str, Any] = {"partitions": 3, "replicas": 3}


async def _ready(session: aiohttp.ClientSession, url: str, name: str) -> bool:
    async with session.get(f"{url}{API}/{name}") as answer:
        if answer.status != 200:
            return False
        conditions = ((await answer.json()).get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


async def _apply(session: aiohttp.ClientSession, url: str, name: str) -> None:
    body = {"apiVersion": "tidelog.io/v1beta1", "kind": "Topic", "metadata": {"name": name}, "spec": SPEC}
    async with session.post(f"{url}{API}", json=body) as answer:
        assert answer.status in (200, 201), await answer.text()


async def _until(check: Any, deadline_s: float = 120.0, poll_s: float = 0.02) -> float:
    started = time.monotonic()
    while not await check():
        if time.monotonic() - started > deadline_s:
            raise TimeoutError("not Ready in time")
        await asyncio.sleep(poll_s)
    return time.monotonic() - started


async def _direct(admin: AdminClient, name: str) -> float:
    started = time.monotonic()
    await admin.create_topic(name, SPEC["partitions"], SPEC["replicas"])

    async def led() -> bool:
        found = (await admin.describe_topics([name]))[name]
        return not isinstance(found, Exception) and all(state.leader >= 0 for state in found.partitions)

    await _until(led)
    return time.monotonic() - started


async def run(single: int, burst: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        cluster = LocalCluster(Path(folder) / "cluster")
        cluster.start()
        try:
            await cluster.wait_ready()
            # The emulator runs in a process of its own, so that the loop polling it measures it rather
            # than competes with it (in one process a poll of 20 GETs took seconds under a burst).
            emulator = subprocess.Popen(
                [sys.executable, "-m", "tidelog.dev.kube_emulator"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
            )
            assert emulator.stdout is not None and emulator.stdin is not None
            url = emulator.stdout.readline().decode().strip()
            try:
                async with (
                    AdminClient(cluster.bootstrap, controllers=cluster.controller_endpoints) as admin,
                    aiohttp.ClientSession() as session,
                ):
                    kubeconfig = write_kubeconfig(url, Path(folder) / "kubeconfig")
                    arguments = [sys.executable, "-m", "tidelog.operator.main", "--standalone"]
                    for endpoint in cluster.bootstrap:
                        arguments += ["--bootstrap", endpoint]
                    for endpoint in cluster.controller_endpoints:
                        arguments += ["--controller", endpoint]
                    # TIDELOG_BENCH_OPERATOR_LOG keeps the operator's log for a look at where time went.
                    log_path = Path(os.environ.get("TIDELOG_BENCH_OPERATOR_LOG") or Path(folder) / "operator.log")
                    with log_path.open("wb") as log:
                        operator = subprocess.Popen(
                            arguments, env={**os.environ, "KUBECONFIG": str(kubeconfig)}, stdout=log, stderr=log
                        )
                        try:
                            await _bench(session, url, admin, single, burst)
                        except TimeoutError:
                            log.flush()
                            print(log_path.read_text()[-3000:], file=sys.stderr)
                            raise
                        finally:
                            operator.terminate()
                            with contextlib.suppress(subprocess.TimeoutExpired):
                                operator.wait(timeout=10)
                            operator.kill()
            finally:
                emulator.stdin.close()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    emulator.wait(timeout=10)
                emulator.kill()
        finally:
            cluster.stop()


async def _bench(session: aiohttp.ClientSession, url: str, admin: AdminClient, single: int, burst: int) -> None:
    await _apply(session, url, "warm-up")  # the operator's first watch and connections
    await _until(lambda: _ready(session, url, "warm-up"))
    direct = [await _direct(admin, f"direct-{n}") for n in range(single)]
    applied = []
    for n in range(single):
        name = f"single-{n}"
        started = time.monotonic()
        await _apply(session, url, name)
        await _until(lambda name=name: _ready(session, url, name))
        applied.append(time.monotonic() - started)
    names = [f"burst-{n}" for n in range(burst)]
    # As `kubectl apply -f` of many files does: requests in flight bounded, not one per resource.
    in_flight = asyncio.Semaphore(20)

    async def bounded(call: Any) -> Any:
        async with in_flight:
            return await call

    started = time.monotonic()
    await asyncio.gather(*(bounded(_apply(session, url, name)) for name in names))
    pending = set(names)

    async def all_ready() -> bool:
        states = await asyncio.gather(*(bounded(_ready(session, url, name)) for name in sorted(pending)))
        pending.difference_update(name for name, ready in zip(sorted(pending), states, strict=True) if ready)
        return not pending

    await _until(all_ready, deadline_s=300, poll_s=0.5)
    burst_s = time.monotonic() - started
    ref, p50 = statistics.median(direct), statistics.median(applied)
    print(f"reference: AdminClient create → every leader elected, p50 {ref * 1000:.0f} ms (n={single})")
    print(
        f"single Topic apply → Ready: p50 {p50 * 1000:.0f} ms, max {max(applied) * 1000:.0f} ms (n={single}); "
        f"{p50 / ref:.1f}× the reference; target ≤ 2000 ms"
    )
    print(f"{burst} Topics applied at once → all Ready: {burst_s:.1f} s; target ≤ 30 s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--single", type=int, default=10)
    parser.add_argument("--burst", type=int, default=200)
    args = parser.parse_args()
    asyncio.run(run(args.single, args.burst))


if __name__ == "__main__":
    main()
