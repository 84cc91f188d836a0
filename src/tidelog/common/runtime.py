"""What every Tidelog service process shares: structured logs, Prometheus metrics over HTTP, gRPC
health, bounded gRPC message sizes, and a clean stop on SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from typing import Final

import grpc
import structlog
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1._async import HealthServicer
from prometheus_client import start_http_server

__all__ = [
    "GRPC_MESSAGE_BYTES_MAX",
    "GRPC_OPTIONS",
    "configure_logging",
    "grpc_server",
    "mark_serving",
    "start_metrics",
    "stop_on_signals",
]

# socket.request.max.bytes (Kafka's default): the largest request a service accepts.
GRPC_MESSAGE_BYTES_MAX: Final = 100 * 1024 * 1024
# reconnect.backoff.ms / reconnect.backoff.max.ms (Kafka's defaults): how soon a channel tries a
# peer again after failing to connect. gRPC's own default grows to 120 s, so a peer that was
# restarted a few times in a row (failover, a rolling restart) could stay unreachable for a minute
# or two after it was back: the nemesis saw a partition get no acknowledgement for 90 s that way.
RECONNECT_BACKOFF_MS: Final = 50
RECONNECT_BACKOFF_MAX_MS: Final = 1000
GRPC_OPTIONS: Final = [
    ("grpc.max_receive_message_length", GRPC_MESSAGE_BYTES_MAX),
    ("grpc.max_send_message_length", GRPC_MESSAGE_BYTES_MAX),
    ("grpc.http2.lookahead_bytes", 16 * 1024 * 1024),
    ("grpc.initial_reconnect_backoff_ms", RECONNECT_BACKOFF_MS),
    ("grpc.min_reconnect_backoff_ms", RECONNECT_BACKOFF_MS),
    ("grpc.max_reconnect_backoff_ms", RECONNECT_BACKOFF_MAX_MS),
]


def configure_logging(service: str, **context: object) -> None:
    """JSON lines on stderr, one object per event, with the service and its id bound."""
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(message)s")
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(),
        ],
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
    structlog.contextvars.bind_contextvars(service=service, **context)


def start_metrics(port: int, host: str = "127.0.0.1") -> None:
    """Serve /metrics for Prometheus (port 0 turns it off)."""
    if port:
        start_http_server(port, addr=host)


def grpc_server() -> tuple[grpc.aio.Server, HealthServicer]:
    server = grpc.aio.server(options=GRPC_OPTIONS)
    health = HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    return server, health


async def mark_serving(health: HealthServicer, service_names: list[str], serving: bool = True) -> None:
    status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
    for name in ["", *service_names]:
        await health.set(name, status)


def stop_on_signals() -> asyncio.Event:
    """An event set by SIGTERM or SIGINT (the process then shuts down cleanly).

    SIGUSR1 logs what every asyncio task is waiting on, for diagnosing a stuck process.
    """
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signal_number in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signal_number, stopping.set)
    loop.add_signal_handler(signal.SIGUSR1, _log_tasks)
    return stopping


def _log_tasks() -> None:
    log = structlog.get_logger(__name__)
    for task in asyncio.all_tasks():
        chain: list[str] = []
        awaiting: object = task.get_coro()
        while awaiting is not None and len(chain) < 16:
            frame = getattr(awaiting, "cr_frame", None)
            chain.append(
                f"{getattr(awaiting, '__qualname__', type(awaiting).__name__)}:{getattr(frame, 'f_lineno', '')}"
            )
            awaiting = getattr(awaiting, "cr_await", None)
        log.info("task_dump", task=task.get_name(), awaiting=" <- ".join(chain))
