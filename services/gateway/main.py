"""The REST gateway process: `python -m tidelog.gateway.main --id 1 --port 8082 --etcd host:port`.

Finds the brokers through etcd, serves HTTP with uvicorn on this process's event loop, gRPC health
on `--health-port`, Prometheus metrics on `--metrics-port`. SIGTERM: stop taking connections,
finish the requests under way, close every consumer instance (each leaves its group, committing
if it auto-commits), flush the producer, give up the etcd lease.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import structlog
import uvicorn
import uvloop
from etcd3aio import Etcd3Client

from tidelog.client import AdminClient, Consumer, Producer
from tidelog.client.connections import Connections
from tidelog.common.etcd.registry import cluster_id, registered_brokers
from tidelog.common.etcd.session import Session
from tidelog.common.runtime import configure_logging, grpc_server, mark_serving, start_metrics, stop_on_signals
from tidelog.common.settings import GatewaySettings
from tidelog.gateway.access import load_credentials
from tidelog.gateway.app import create_app
from tidelog.gateway.gateway_context import GatewayContext
from tidelog.gateway.instance_registry import InstanceRegistry

log = structlog.get_logger(__name__)

FORWARD_TIMEOUT_S = 330.0  # beyond the longest records long-poll (consumer.request.timeout.ms ≤ 300 s)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Tidelog REST gateway")
    parser.add_argument("--id", required=True, help="gateway id (unique among replicas)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--advertised-url", help="URL other replicas reach this one at (default http://host:port)")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--health-port", type=int, default=0, help="gRPC health (0: off)")
    parser.add_argument("--metrics-port", type=int, default=0)
    parser.add_argument("--etcd", required=True, help="etcd endpoint host:port")
    parser.add_argument("--credentials-file", type=Path, help="'credential principal' per line: turns auth on")
    parser.add_argument("--linger-ms", type=int, default=2, help="linger.ms of the gateway's producer")
    GatewaySettings.add_arguments(parser)
    args = parser.parse_args(argv)
    args.settings = GatewaySettings.parse_into(parser, args)
    return args


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield  # SIGTERM and SIGINT are this process's own (stop_on_signals)


async def serve(args: argparse.Namespace) -> None:
    configure_logging("gateway", gateway_id=args.id)
    start_metrics(args.metrics_port)
    stopping = stop_on_signals()
    credentials = load_credentials(args.credentials_file) if args.credentials_file else {}
    etcd = Etcd3Client([args.etcd])
    await etcd.connect()
    limits: GatewaySettings = args.settings
    session = await Session(etcd, ttl_s=max(1, limits.gateway_session_timeout_ms // 1000)).start()
    bootstrap = await registered_brokers(etcd)
    url = args.advertised_url or f"http://{args.host}:{args.port}"
    connections = Connections()
    registry = InstanceRegistry(
        etcd,
        session,
        gateway_id=str(args.id),
        url=url,
        instance_timeout_ms=limits.consumer_instance_timeout_ms,
        instances_max=limits.consumer_instances_max,
    )
    producer = Producer(bootstrap, linger_ms=args.linger_ms, connections=connections)
    context = GatewayContext(
        limits=limits,
        bootstrap=bootstrap,
        connections=connections,
        producer=producer,
        admin=AdminClient(bootstrap, connections=connections),
        offsets=Consumer(bootstrap, connections=connections),
        registry=registry,
        cluster_id=await cluster_id(etcd),
    )
    forward_client = httpx.AsyncClient(timeout=FORWARD_TIMEOUT_S)
    _, stack = create_app(context, credentials=credentials, forward_client=forward_client)
    listener = socket.create_server((args.host, args.port), reuse_port=False)
    server = _Server(
        uvicorn.Config(
            stack,
            log_config=None,
            log_level="warning",  # uvicorn's own lines are plain text; ours are JSON (and name the same events)
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=10,
            http="httptools",
        )
    )
    health_server, health = grpc_server()
    if args.health_port:
        health_server.add_insecure_port(f"{args.host}:{args.health_port}")
        await health_server.start()
    serving = asyncio.create_task(server.serve(sockets=[listener]))
    background = [asyncio.create_task(registry.expire()), asyncio.create_task(registry.keep_registered())]
    await mark_serving(health, ["tidelog.v1.Gateway"])
    log.info("gateway_started", url=url, brokers=bootstrap, auth=bool(credentials), cluster_id=context.cluster_id)
    stop_waiting = asyncio.create_task(stopping.wait())
    await asyncio.wait({serving, stop_waiting}, return_when=asyncio.FIRST_COMPLETED)
    stop_waiting.cancel()
    log.info("gateway_stopping")
    await mark_serving(health, ["tidelog.v1.Gateway"], serving=False)
    server.should_exit = True
    await serving
    for task in background:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    await registry.close()  # every instance leaves its group; the lease goes
    await producer.close()
    await forward_client.aclose()
    await context.offsets.close()
    await connections.close()
    await health_server.stop(grace=1)
    await etcd.close()
    log.info("gateway_stopped")


def main(argv: list[str] | None = None) -> None:
    uvloop.run(serve(parse_args(argv)))


if __name__ == "__main__":
    main()
