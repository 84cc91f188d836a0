"""The controller process: `python -m tidelog.controller.main --id 1 --port 9190 --etcd 127.0.0.1:2379`."""

from __future__ import annotations

import argparse
import asyncio
import contextlib

import grpc
import structlog

from tidelog.client.group_admin import GroupAdmin
from tidelog.common.channels import ChannelPool
from tidelog.common.settings import ControllerSettings, parse_process_args
from tidelog.controller import controller_metrics, exporter_view
from tidelog.controller.admin_service import AdminService
from tidelog.controller.controller import Controller
from tidelog.controller.controller_config import ControllerConfig
from tidelog.server_common.etcd.connect import etcd_client
from tidelog.server_common.runtime import run_process, run_service
from tidelog.server_common.security.service_security import ServiceSecurity
from tidelog.v1 import controller_pb2_grpc

log = structlog.get_logger(__name__)
EXPORTER_REQUEST_TIMEOUT_MS = 5000  # a refresh of the kafka_exporter view gives up on a silent broker


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Tidelog controller")
    parser.add_argument("--id", type=int, required=True, help="controller id")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--advertised-host", help="host clients are told to use (default: --host)")
    parser.add_argument("--port", type=int, required=True, help="admin gRPC port")
    parser.add_argument("--metrics-port", type=int, default=0)
    parser.add_argument("--etcd", required=True, help="etcd endpoints host:port,... (every member)")
    return parse_process_args(parser, ControllerSettings, argv)


class _Controller:
    """The controller's parts of the shared service sequence (tidelog.server_common.runtime.run_service)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.config = ControllerConfig(
            controller_id=args.id,
            endpoint=f"{args.advertised_host or args.host}:{args.port}",
            settings=args.settings,
        )
        self.etcd = etcd_client(args.etcd, args.security)
        self.service_security = ServiceSecurity(args.security, self.etcd)
        self.access = self.service_security.access
        self.controller = Controller(self.config, self.etcd, channels=ChannelPool(args.security))
        controller_metrics.register(self.controller, args.settings.controller_metrics_partition_series_max)
        security = args.security
        self.exporter = exporter_view.register(
            self.controller,
            lambda bootstrap: GroupAdmin(bootstrap, request_timeout_ms=EXPORTER_REQUEST_TIMEOUT_MS, security=security),
            args.settings,
        )
        self.running: asyncio.Task[None] | None = None
        self.exporting: asyncio.Task[None] | None = None

    def add_to(self, server: grpc.aio.Server) -> list[str]:
        controller_pb2_grpc.add_ControllerServicer_to_server(AdminService(self.controller, self.access), server)
        return ["tidelog.v1.Controller"]

    async def start(self) -> None:
        if self.etcd.kv is None:  # (connected already when security needed it first)
            await self.etcd.connect()
        self.running = asyncio.create_task(self.controller.run())
        self.exporting = asyncio.create_task(self.exporter.run())

    async def drain(self) -> None:
        pass  # brokers move their own leadership; the controller only steps down (leave)

    async def leave(self) -> None:
        await self.controller.stop()
        if self.running is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(self.running, timeout=10)

    async def close(self) -> None:
        if self.exporting is not None:
            self.exporting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.exporting
        await self.exporter.close()
        await self.controller.broker_requests.close()
        await self.etcd.close()


async def serve(args: argparse.Namespace) -> None:
    async def build(stopping: asyncio.Event) -> _Controller:
        return _Controller(args)

    await run_service(
        "controller",
        listen=f"{args.host}:{args.port}",
        metrics_port=args.metrics_port,
        build=build,
        security=args.security,
        controller_id=args.id,
    )


def main(argv: list[str] | None = None) -> None:
    run_process(serve(parse_args(argv)))


if __name__ == "__main__":
    main()
