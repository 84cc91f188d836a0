"""The broker process: `python -m tidelog.broker.main --id 1 --port 9092 --etcd 127.0.0.1:2379 --data-dir d`."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import structlog
from etcd3aio import Etcd3Client

from tidelog.broker.broker_service import BrokerService
from tidelog.broker.controlled_shutdown import controlled_shutdown
from tidelog.broker.isr_manager import IsrManager
from tidelog.broker.metadata_cache import MetadataCache
from tidelog.broker.producer_id_manager import ProducerIdManager
from tidelog.broker.registration import Registration
from tidelog.broker.replica_manager import ReplicaManager
from tidelog.common.metadata import BrokerRegistration
from tidelog.common.runtime import run_service
from tidelog.v1 import broker_pb2_grpc

log = structlog.get_logger(__name__)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Tidelog broker")
    parser.add_argument("--id", type=int, required=True, help="broker.id")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--advertised-host", help="host clients are told to use (default: --host)")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--rack", default="", help="broker.rack")
    parser.add_argument("--metrics-port", type=int, default=0)
    parser.add_argument("--etcd", required=True, help="etcd endpoint host:port")
    parser.add_argument("--data-dir", required=True, help="log.dirs: where partition logs live")
    parser.add_argument("--session-timeout-ms", type=int, default=6000, help="broker.session.timeout.ms")
    parser.add_argument("--io-threads", type=int, default=8, help="num.io.threads")
    parser.add_argument("--flush-interval-ms", type=int, default=1000, help="log.flush.scheduler.interval.ms")
    parser.add_argument(
        "--retention-check-interval-ms", type=int, default=300_000, help="log.retention.check.interval.ms"
    )
    parser.add_argument("--replica-lag-time-max-ms", type=int, default=30_000, help="replica.lag.time.max.ms")
    parser.add_argument("--replica-fetch-wait-max-ms", type=int, default=500, help="replica.fetch.wait.max.ms")
    parser.add_argument("--replica-fetch-max-bytes", type=int, default=1024 * 1024, help="replica.fetch.max.bytes")
    parser.add_argument("--replica-fetch-backoff-ms", type=int, default=200, help="replica.fetch.backoff.ms")
    parser.add_argument("--producer-id-expiration-ms", type=int, default=86_400_000, help="producer.id.expiration.ms")
    parser.add_argument(
        "--controlled-shutdown-enable", choices=["true", "false"], default="true", help="controlled.shutdown.enable"
    )
    parser.add_argument(
        "--controlled-shutdown-max-retries", type=int, default=3, help="controlled.shutdown.max.retries"
    )
    parser.add_argument(
        "--controlled-shutdown-retry-backoff-ms", type=int, default=5000, help="controlled.shutdown.retry.backoff.ms"
    )
    parser.add_argument(
        "--log-config",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="default topic config for this broker's logs (repeatable)",
    )
    return parser.parse_args(argv)


async def _every(interval_ms: int, replicas: ReplicaManager, work: Callable[[], Any]) -> None:
    while True:
        await asyncio.sleep(interval_ms / 1000)
        try:
            await replicas.run_io(work)
        except Exception:
            log.exception("background_task_failed")


class _Broker:
    """The broker's parts of the shared service sequence (tidelog.common.runtime.run_service)."""

    def __init__(self, args: argparse.Namespace, stopping: asyncio.Event) -> None:
        self.args = args
        defaults = dict(item.split("=", 1) for item in args.log_config)
        self.replicas = ReplicaManager(
            args.id,
            Path(args.data_dir),
            io_threads=args.io_threads,
            log_defaults=defaults,
            fetcher_options={
                "wait_max_ms": args.replica_fetch_wait_max_ms,
                "fetch_max_bytes": args.replica_fetch_max_bytes,
                "backoff_ms": args.replica_fetch_backoff_ms,
            },
        )
        self.metadata = MetadataCache()
        self.etcd = Etcd3Client([args.etcd])
        self.registration = Registration(
            self.etcd,
            BrokerRegistration(
                args.id, args.advertised_host or args.host, args.port, args.rack, incarnation=self.replicas.incarnation
            ),
            ttl_s=max(1, args.session_timeout_ms // 1000),
            on_replaced=stopping.set,  # another process registered this broker id: stop, fenced anyway
        )
        self.isr_manager = IsrManager(self.replicas, self.metadata, lag_time_max_ms=args.replica_lag_time_max_ms)
        self.background: list[asyncio.Task[None]] = []

    def add_to(self, server: grpc.aio.Server) -> list[str]:
        service = BrokerService(self.replicas, self.metadata, ProducerIdManager(self.etcd, self.args.id), self.etcd)
        broker_pb2_grpc.add_BrokerServicer_to_server(service, server)
        return ["tidelog.v1.Broker"]

    async def start(self) -> None:
        args, replicas = self.args, self.replicas
        await self.etcd.connect()
        await self.registration.register()
        replicas.cleaner.start()
        self.background = [
            asyncio.create_task(self.isr_manager.run()),
            asyncio.create_task(_every(args.flush_interval_ms, replicas, replicas.flush_due)),
            asyncio.create_task(_every(args.retention_check_interval_ms, replicas, replicas.apply_retention)),
            asyncio.create_task(
                _every(
                    args.retention_check_interval_ms,
                    replicas,
                    lambda: replicas.expire_producers(args.producer_id_expiration_ms),
                )
            ),
        ]

    async def drain(self) -> None:
        if self.args.controlled_shutdown_enable == "true":
            await controlled_shutdown(
                self.metadata,
                self.args.id,
                self.replicas.incarnation,
                max_retries=self.args.controlled_shutdown_max_retries,
                backoff_ms=self.args.controlled_shutdown_retry_backoff_ms,
            )

    async def leave(self) -> None:
        await self.registration.deregister()  # the controller moves leadership away now, not after a timeout

    async def close(self) -> None:
        for task in self.background:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.isr_manager.close()
        await self.replicas.close()  # flushes every log and leaves the clean-shutdown marker
        await self.etcd.close()


async def serve(args: argparse.Namespace) -> None:
    async def build(stopping: asyncio.Event) -> _Broker:
        return _Broker(args, stopping)

    await run_service(
        "broker", listen=f"{args.host}:{args.port}", metrics_port=args.metrics_port, build=build, broker_id=args.id
    )


def main(argv: list[str] | None = None) -> None:
    asyncio.run(serve(parse_args(argv)))


if __name__ == "__main__":
    main()
