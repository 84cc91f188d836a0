"""The broker process: `python -m tidelog.broker.main --id 1 --port 9092 --etcd 127.0.0.1:2379 --data-dir d`."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

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
from tidelog.common.runtime import configure_logging, grpc_server, mark_serving, start_metrics, stop_on_signals
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


async def serve(args: argparse.Namespace) -> None:
    configure_logging("broker", broker_id=args.id)
    start_metrics(args.metrics_port)
    stopping = stop_on_signals()
    defaults = dict(item.split("=", 1) for item in args.log_config)
    replicas = ReplicaManager(
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
    metadata = MetadataCache()
    etcd = Etcd3Client([args.etcd])
    server, health = grpc_server()
    broker_pb2_grpc.add_BrokerServicer_to_server(
        BrokerService(replicas, metadata, ProducerIdManager(etcd, args.id), etcd), server
    )
    server.add_insecure_port(f"{args.host}:{args.port}")
    await server.start()
    await etcd.connect()
    registration = Registration(
        etcd,
        BrokerRegistration(
            args.id, args.advertised_host or args.host, args.port, args.rack, incarnation=replicas.incarnation
        ),
        ttl_s=max(1, args.session_timeout_ms // 1000),
        on_replaced=stopping.set,  # another process registered this broker id: stop, fenced anyway
    )
    await registration.register()
    replicas.cleaner.start()
    isr_manager = IsrManager(replicas, metadata, lag_time_max_ms=args.replica_lag_time_max_ms)
    background = [
        asyncio.create_task(isr_manager.run()),
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
    await mark_serving(health, ["tidelog.v1.Broker"])
    log.info("broker_started", endpoint=f"{args.host}:{args.port}", data_dir=args.data_dir)
    await stopping.wait()
    log.info("broker_stopping")
    if args.controlled_shutdown_enable == "true":
        await controlled_shutdown(
            metadata,
            args.id,
            replicas.incarnation,
            max_retries=args.controlled_shutdown_max_retries,
            backoff_ms=args.controlled_shutdown_retry_backoff_ms,
        )
    await mark_serving(health, ["tidelog.v1.Broker"], serving=False)
    await registration.deregister()  # the controller moves leadership away now, not after a timeout
    await server.stop(grace=2)
    for task in background:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    await isr_manager.close()
    await replicas.close()  # flushes every log and leaves the clean-shutdown marker
    await etcd.close()
    log.info("broker_stopped")


def main(argv: list[str] | None = None) -> None:
    asyncio.run(serve(parse_args(argv)))


if __name__ == "__main__":
    main()
