"""`tidelog dev up`: the whole platform on this machine, as real processes, on a data folder.

Starts etcd, the controllers, the brokers, the group coordinators and the REST gateway
(tidelog.local_cluster), waits until a controller is
active and every broker is registered, prints the endpoints, and runs until Ctrl-C or SIGTERM,
then stops every process cleanly. Run it again on the same folder: same endpoints, same data.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from pathlib import Path

from tidelog.cli.output import table
from tidelog.local_cluster import LocalCluster

__all__ = ["add_dev_commands"]


async def _run(cluster: LocalCluster) -> None:
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signal_number in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signal_number, stopping.set)
    cluster.start()
    try:
        await cluster.wait_ready()
        rows = [["etcd", cluster.etcd.endpoint, ""]]
        rows += [
            [f"controller-{i}", endpoint, cluster.metrics_endpoint(f"controller-{i}")]
            for i, endpoint in zip(cluster.controller_ids, cluster.controller_endpoints, strict=True)
        ]
        rows += [
            [f"broker-{i}", endpoint, cluster.metrics_endpoint(f"broker-{i}")]
            for i, endpoint in zip(cluster.broker_ids, cluster.bootstrap, strict=True)
        ]
        rows += [
            [f"coordinator-{i}", endpoint, cluster.metrics_endpoint(f"coordinator-{i}")]
            for i, endpoint in zip(cluster.coordinator_ids, cluster.coordinator_endpoints, strict=True)
        ]
        rows += [
            [f"gateway-{i}", url, cluster.metrics_endpoint(f"gateway-{i}")]
            for i, url in zip(cluster.gateway_ids, cluster.gateway_urls, strict=True)
        ]
        print(table(["process", "endpoint", "metrics"], rows))
        print(
            f"\ndata and logs under {cluster.data_dir}; try:\n"
            f"  tidelog topic create demo --partitions 6\n"
            f"  seq 1 1000 | tidelog produce demo\n"
            f"  tidelog consume demo --from-beginning --max-messages 10\n"
            + "".join(f"  curl {url}/topics/demo   # the REST gateway\n" for url in cluster.gateway_urls[:1])
            + "Ctrl-C stops everything.",
            flush=True,
        )
        while not stopping.is_set():
            cluster.check_alive()
            try:
                await asyncio.wait_for(stopping.wait(), timeout=1.0)
            except TimeoutError:
                continue
    finally:
        print("stopping ...", flush=True)
        cluster.stop()
        print("stopped.")


def _up(args: argparse.Namespace) -> int:
    cluster = LocalCluster(
        Path(args.data_dir),
        brokers=args.brokers,
        controllers=args.controllers,
        coordinators=args.coordinators,
        gateways=args.gateways,
        metrics=True,
    )
    asyncio.run(_run(cluster))
    return 0


def add_dev_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    dev = commands.add_parser("dev", help="run Tidelog locally")
    dev_commands = dev.add_subparsers(dest="dev_command", required=True)
    up = dev_commands.add_parser(
        "up", help="start etcd, controllers, brokers, coordinators and the REST gateway until Ctrl-C"
    )
    up.add_argument("--data-dir", default="data", help="folder for all local data (default: ./data)")
    up.add_argument("--brokers", type=int, default=3)
    up.add_argument("--controllers", type=int, default=2)
    up.add_argument("--coordinators", type=int, default=2, help="group coordinator instances")
    up.add_argument("--gateways", type=int, default=1, help="REST gateway replicas (authentication off)")
    up.set_defaults(handler=_up)
