"""The broker process: `python -m tidelog.broker.main --id 1 --port 9092 --etcd 127.0.0.1:2379 --data-dir d`."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import structlog

from tidelog.broker import broker_metrics, server_metrics
from tidelog.broker.broker_service import BrokerService
from tidelog.broker.controlled_shutdown import controlled_shutdown
from tidelog.broker.isr_manager import IsrManager
from tidelog.broker.kafka_api.listener import KafkaListener
from tidelog.broker.kafka_api.listener_spec import ListenerSpec, advertised_address, kafka_listener
from tidelog.broker.metadata_cache import MetadataCache
from tidelog.broker.producer_id_manager import ProducerIdManager
from tidelog.broker.quota_manager import QuotaManager
from tidelog.broker.readiness import Readiness
from tidelog.broker.registration import Registration
from tidelog.broker.replica_manager import ReplicaManager
from tidelog.broker.storage import LogConfig
from tidelog.common.channels import ChannelPool
from tidelog.common.errors import InvalidConfigError
from tidelog.common.settings import BrokerSettings, parse_process_args
from tidelog.server_common.etcd.active_controller import active_controller_endpoint
from tidelog.server_common.etcd.connect import etcd_client
from tidelog.server_common.etcd.registry import cluster_id
from tidelog.server_common.metadata import BrokerRegistration
from tidelog.server_common.runtime import run_process, run_service
from tidelog.server_common.security.service_security import ServiceSecurity
from tidelog.v1 import broker_pb2, broker_pb2_grpc

log = structlog.get_logger(__name__)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Tidelog broker")
    parser.add_argument("--id", type=int, required=True, help="broker.id")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--advertised-host", help="host clients are told to use (default: --host)")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument(
        "--advertised-port", type=int, help="port clients are told to use (default: --port; a proxy's in between)"
    )
    parser.add_argument("--rack", default="", help="broker.rack")
    parser.add_argument("--metrics-port", type=int, default=0)
    parser.add_argument("--etcd", required=True, help="etcd endpoints host:port,... (every member)")
    parser.add_argument("--data-dir", required=True, help="log.dirs: where partition logs live")
    parser.add_argument(
        "--log-config",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="default topic config for this broker's logs (repeatable)",
    )
    args = parse_process_args(parser, BrokerSettings, argv)
    args.log_defaults = {
        name.strip(): value.strip() for name, _, value in (item.partition("=") for item in args.log_config)
    }
    try:  # checked now, not when the first log opens
        LogConfig.from_configs(args.log_defaults)
    except InvalidConfigError as error:
        parser.error(f"--log-config: {error}")
    try:
        settings: BrokerSettings = args.settings
        args.kafka_listener = kafka_listener(
            settings.listeners, settings.advertised_listeners, args.advertised_host or args.host
        )
    except InvalidConfigError as error:
        parser.error(str(error))
    return args


async def _every(interval_ms: int, replicas: ReplicaManager, work: Callable[[], Any]) -> None:
    while True:
        await asyncio.sleep(interval_ms / 1000)
        try:
            await replicas.io.run(work)
        except Exception:
            log.exception("background_task_failed")


class _Broker:
    """The broker's parts of the shared service sequence (tidelog.server_common.runtime.run_service)."""

    def __init__(self, args: argparse.Namespace, stopping: asyncio.Event) -> None:
        self.args = args
        self.settings: BrokerSettings = args.settings
        settings = self.settings
        # One pool for every channel this broker opens: to leaders (fetch) and to the controller.
        self.channels = ChannelPool(args.security)
        self.replicas = ReplicaManager(
            args.id, Path(args.data_dir), settings, log_defaults=args.log_defaults, channels=self.channels
        )
        broker_metrics.register(self.replicas, settings.metrics_partition_series_max)
        server_metrics.register(self.replicas.io.busy, settings.num_io_threads, args.port)
        self.metadata = MetadataCache()
        self.etcd = etcd_client(args.etcd, args.security)
        self.service_security = ServiceSecurity(args.security, self.etcd)
        self.access = self.service_security.access
        self.quotas = QuotaManager(self.etcd, settings)
        self.registration = Registration(
            self.etcd,
            BrokerRegistration(
                args.id,
                args.advertised_host or args.host,
                args.advertised_port or args.port,
                args.rack,
                incarnation=self.replicas.incarnation,
            ),
            ttl_s=max(1, settings.broker_session_timeout_ms // 1000),
            on_replaced=stopping.set,  # another process registered this broker id: stop, fenced anyway
            on_lost=self.replicas.fencing.session_lost,
            on_restored=self.replicas.fencing.registered_again,
        )
        self.isr_manager = IsrManager(self.replicas, self.metadata, channels=self.channels)
        readiness_file = settings.broker_readiness_file
        self.readiness = Readiness(args.id, self.metadata, Path(readiness_file) if readiness_file else None)
        self.background: list[asyncio.Task[None]] = []
        self.readiness_task: asyncio.Task[None] | None = None
        self.service: BrokerService | None = None
        self.kafka: KafkaListener | None = None

    def add_to(self, server: grpc.aio.Server) -> list[str]:
        self.service = service = BrokerService(
            self.replicas,
            self.metadata,
            ProducerIdManager(self.etcd, self.args.id),
            self.etcd,
            settings=self.settings,
            access=self.access,
            quotas=self.quotas,
            channels=self.channels,
        )
        broker_pb2_grpc.add_BrokerServicer_to_server(service, server)
        return [broker_pb2.DESCRIPTOR.services_by_name["Broker"].full_name]

    async def start(self) -> None:
        settings, replicas = self.settings, self.replicas
        if self.etcd.kv is None:  # (connected already when security needed it first)
            await self.etcd.connect()
        await self.quotas.start()
        # The data directory exists from the start, as Kafka creates log.dirs: a broker that never
        # hosted a log still writes its list of cleanly closed logs when it stops.
        await replicas.io.run(lambda: replicas.data_dir.mkdir(parents=True, exist_ok=True))
        # Before any log opens (the controller's first push follows the registration).
        clean_logs = await replicas.io.run(replicas.clean_shutdown.take)
        log.info("clean_shutdown_list_read", logs=clean_logs)
        if self.args.kafka_listener is not None:
            await self._start_kafka_listener(*self.args.kafka_listener)
        await self.registration.register()
        replicas.cleaner.start()
        self.readiness_task = asyncio.create_task(self.readiness.run())
        self.background = [
            asyncio.create_task(self.isr_manager.run()),
            asyncio.create_task(_every(settings.log_flush_scheduler_interval_ms, replicas, replicas.flush_due)),
            asyncio.create_task(_every(settings.log_retention_check_interval_ms, replicas, replicas.apply_retention)),
            asyncio.create_task(
                _every(
                    settings.log_retention_check_interval_ms,
                    replicas,
                    lambda: replicas.expire_producers(settings.producer_id_expiration_ms),
                )
            ),
        ]

    async def _start_kafka_listener(self, bound: ListenerSpec, told: ListenerSpec | None) -> None:
        """Listen for Kafka's protocol before registering, so the registration says where."""
        assert self.service is not None, "the gRPC service is built first"
        self.kafka = KafkaListener(
            self.service,
            self.args.id,
            await cluster_id(self.etcd),
            self.channels,
            request_max_bytes=self.settings.socket_request_max_bytes,
            connections_max=self.settings.max_connections,
            idle_ms=self.settings.connections_max_idle_ms,
            security=self.args.security,
            sessions=self.service_security.sessions,
        )
        port = await self.kafka.start(bound.host, bound.port)
        host, advertised_port = advertised_address(bound, told, port, self.args.advertised_host or self.args.host)
        self.kafka.advertised = (host, advertised_port)
        self.registration.broker = dataclasses.replace(
            self.registration.broker, kafka_host=host, kafka_port=advertised_port
        )

    async def drain(self) -> None:
        if self.readiness_task is not None:  # stopping: not ready for anyone to restart after us
            self.readiness_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.readiness_task
        self.readiness.close()
        if self.settings.controlled_shutdown_enable:
            await controlled_shutdown(
                self.metadata,
                self.args.id,
                self.replicas.incarnation,
                self.settings,
                channels=self.channels,
                find_controller=lambda: active_controller_endpoint(self.etcd),
            )

    async def leave(self) -> None:
        if self.kafka is not None:
            await self.kafka.close()
        await self.registration.deregister()  # the controller moves leadership away now, not after a timeout
        self.replicas.end_long_polls()  # the server's stop waits for no fetch's long poll

    async def close(self) -> None:
        for task in self.background:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.isr_manager.close()
        await self.replicas.close()  # flushes every log and leaves the clean-shutdown marker
        await self.quotas.close()
        await self.etcd.close()


async def serve(args: argparse.Namespace) -> None:
    async def build(stopping: asyncio.Event) -> _Broker:
        return _Broker(args, stopping)

    await run_service(
        "broker",
        listen=f"{args.host}:{args.port}",
        metrics_port=args.metrics_port,
        build=build,
        socket_request_max_bytes=args.settings.socket_request_max_bytes,
        security=args.security,
        broker_id=args.id,
    )


def main(argv: list[str] | None = None) -> None:
    run_process(serve(parse_args(argv)))


if __name__ == "__main__":
    main()
