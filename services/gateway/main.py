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

import grpc
import httpx
import structlog
import uvicorn
import uvloop
from etcd3aio import Etcd3Client

from tidelog.client import AdminClient, Consumer, Producer
from tidelog.client.connections import Connections
from tidelog.common.settings import GatewaySettings, parse_process_args
from tidelog.gateway.access import load_credentials
from tidelog.gateway.app import create_app
from tidelog.gateway.gateway_context import GatewayContext
from tidelog.gateway.instance_registry import InstanceRegistry
from tidelog.gateway.principal_clients import ClientsByPrincipal
from tidelog.gateway.rest_tls import RestTls
from tidelog.gateway.scram_basic import ScramBasic
from tidelog.server_common.etcd.connect import etcd_client
from tidelog.server_common.etcd.registry import cluster_id, registered_brokers
from tidelog.server_common.etcd.session import Session
from tidelog.server_common.runtime import run_process, run_service
from tidelog.server_common.security.authentication.credential_store import CredentialCache

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
    parser.add_argument("--etcd", required=True, help="etcd endpoints host:port,... (every member)")
    parser.add_argument("--credentials-file", type=Path, help="'credential principal' per line: turns auth on")
    return parse_process_args(parser, GatewaySettings, argv)


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield  # SIGTERM and SIGINT are this process's own (stop_on_signals)


class _Gateway:
    """The gateway's parts of the shared service sequence (tidelog.server_common.runtime.run_service):
    HTTP through uvicorn on this event loop; gRPC health only (on --health-port)."""

    def __init__(self, args: argparse.Namespace, etcd: Etcd3Client, stopping: asyncio.Event) -> None:
        self.args = args
        self.settings: GatewaySettings = args.settings
        self.etcd = etcd
        self.stopping = stopping
        self.credentials = load_credentials(args.credentials_file) if args.credentials_file else {}
        settings = self.settings
        self.rest_tls = RestTls(settings) if settings.rest_ssl_certificate_location else None
        scheme = "https" if self.rest_tls else "http"
        self.url = args.advertised_url or f"{scheme}://{args.host}:{args.port}"
        self.connections = Connections(args.security)
        # Requests for an instance another replica holds go there, over HTTPS when this one serves it.
        self.forward_client = httpx.AsyncClient(
            timeout=FORWARD_TIMEOUT_S, verify=self.rest_tls.client_context() if self.rest_tls else True
        )
        self.scram_credentials = CredentialCache(etcd) if settings.authentication_method == "BASIC" else None
        self.background: list[asyncio.Task[None]] = []
        self.serving: asyncio.Task[None] | None = None

    async def build(self) -> _Gateway:
        settings = self.settings
        self.session = await Session(self.etcd, ttl_s=max(1, settings.gateway_session_timeout_ms // 1000)).start()
        bootstrap = await registered_brokers(self.etcd)
        self.registry = InstanceRegistry(
            self.etcd,
            self.session,
            gateway_id=str(self.args.id),
            url=self.url,
            settings=settings,
        )
        self.producer = Producer(bootstrap, linger_ms=settings.producer_linger_ms, connections=self.connections)
        authenticating = bool(self.credentials) or self.scram_credentials is not None
        self.principals = (
            ClientsByPrincipal(bootstrap, self.args.security, settings)
            if authenticating and settings.rest_principal_propagation_enable
            else None
        )
        if self.scram_credentials is not None:
            await self.scram_credentials.start()
        self.context = GatewayContext(
            settings=settings,
            bootstrap=bootstrap,
            connections=self.connections,
            producer=self.producer,
            admin=AdminClient(bootstrap, connections=self.connections),
            offsets=Consumer(bootstrap, connections=self.connections),
            registry=self.registry,
            cluster_id=await cluster_id(self.etcd),
            principals=self.principals,
        )
        _, stack = create_app(
            self.context,
            credentials=self.credentials,
            forward_client=self.forward_client,
            basic=ScramBasic(self.scram_credentials) if self.scram_credentials is not None else None,
        )
        self.server = _Server(
            uvicorn.Config(
                stack,
                log_config=None,
                log_level="warning",  # uvicorn's own lines are plain text; ours are JSON (and name the same events)
                access_log=False,
                lifespan="off",
                timeout_graceful_shutdown=10,
                http="httptools",
                # The caller's address is the peer's unless a trusted proxy forwards it: uvicorn by
                # default believes X-Forwarded-For from loopback, so a local caller could spoof its
                # host past a host-Deny ACL.
                proxy_headers=bool(settings.rest_forwarded_trusted_proxies),
                forwarded_allow_ips=",".join(settings.rest_forwarded_trusted_proxies),
                **(self.rest_tls.uvicorn_options() if self.rest_tls else {}),
            )
        )
        return self

    def add_to(self, server: grpc.aio.Server) -> list[str]:
        return ["tidelog.v1.Gateway"]  # health only: the API is HTTP

    async def start(self) -> None:
        listener = socket.create_server((self.args.host, self.args.port), reuse_port=False)
        self.serving = asyncio.create_task(self.server.serve(sockets=[listener]))
        self.serving.add_done_callback(lambda _: self.stopping.set())  # HTTP gone: the process goes too
        self.background = [
            asyncio.create_task(self.registry.expire()),
            asyncio.create_task(self.registry.keep_registered()),
        ]
        if self.rest_tls is not None:
            self.background.append(asyncio.create_task(self.rest_tls.follow(lambda: self.server.config.ssl)))
        log.info(
            "gateway_serving",
            url=self.url,
            brokers=self.context.bootstrap,
            auth=bool(self.credentials),
            cluster_id=self.context.cluster_id,
        )

    async def drain(self) -> None:
        pass  # nothing to hand over while serving: NOT_SERVING first, then HTTP stops (leave)

    async def leave(self) -> None:
        self.server.should_exit = True  # stop taking connections, finish the requests under way
        if self.serving is not None:
            await self.serving
        for task in self.background:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.registry.close()  # every instance leaves its group; the lease goes

    async def close(self) -> None:
        if self.principals is not None:
            await self.principals.close()
        if self.scram_credentials is not None:
            await self.scram_credentials.close()
        await self.producer.close()
        await self.forward_client.aclose()
        await self.context.offsets.close()
        await self.connections.close()
        await self.etcd.close()


async def serve(args: argparse.Namespace) -> None:
    async def build(stopping: asyncio.Event) -> _Gateway:
        etcd = etcd_client(args.etcd, args.security)
        await etcd.connect()
        return await _Gateway(args, etcd, stopping).build()

    await run_service(
        "gateway",
        listen=f"{args.host}:{args.health_port}" if args.health_port else None,
        metrics_port=args.metrics_port,
        build=build,
        grace_s=1.0,
        metrics_security=args.security,
        gateway_id=args.id,
    )


def main(argv: list[str] | None = None) -> None:
    run_process(serve(parse_args(argv)), run=uvloop.run)


if __name__ == "__main__":
    main()
