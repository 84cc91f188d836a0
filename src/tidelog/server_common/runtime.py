"""What every Tidelog service process shares: structured logs, Prometheus metrics over HTTP, gRPC
health, bounded gRPC message sizes, and a clean stop on SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, NoReturn, Protocol

import grpc
import structlog
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1._async import HealthServicer
from prometheus_client import disable_created_metrics

from tidelog.common.grpc_options import GRPC_MESSAGE_BYTES_MAX, GRPC_OPTIONS
from tidelog.common.security.tls.credentials import server_credentials
from tidelog.common.settings import SecuritySettings
from tidelog.server_common import metrics_http, runtime_metrics
from tidelog.server_common.request_decoding import RequestDecoding
from tidelog.server_common.security.service_security import ServiceSecurity

__all__ = [
    "GRPC_MESSAGE_BYTES_MAX",
    "GRPC_OPTIONS",
    "ServiceParts",
    "configure_logging",
    "grpc_server",
    "mark_serving",
    "run_service",
    "start_metrics",
    "stop_on_signals",
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


def start_metrics(port: int, host: str = "127.0.0.1", security: SecuritySettings | None = None) -> None:
    """Serve /metrics for Prometheus (port 0 turns it off), on `metrics.host` if set, else `host`,
    protected as the metrics.* settings say. Without prometheus_client's `_created` series: no
    Kafka dashboard reads them, and they would double every counter's series."""
    disable_created_metrics()  # type: ignore[no-untyped-call]  # (untyped in prometheus_client)
    if not port:
        return
    protection = None
    if security is not None:
        host = security.metrics_host or host
        protection = metrics_http.MetricsProtection(
            security.metrics_ssl_certificate_location,
            security.metrics_ssl_key_location,
            security.metrics_ssl_ca_location,
            security.metrics_bearer_token_file,
        )
    metrics_http.serve(port, host, protection)


def grpc_server(
    socket_request_max_bytes: int = GRPC_MESSAGE_BYTES_MAX,
    interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
    authentication: Sequence[grpc.aio.ServerInterceptor] = (),
) -> tuple[grpc.aio.Server, HealthServicer]:
    """The server with its interceptors: `authentication` outermost (it refuses a call before its
    body is read), then undecodable requests refused (INVALID_ARGUMENT), then `interceptors`."""
    limits = [
        ("grpc.max_receive_message_length", socket_request_max_bytes),
        ("grpc.max_send_message_length", socket_request_max_bytes),
    ]
    # the later of two equal keys wins; undecodable requests are refused first (INVALID_ARGUMENT)
    server = grpc.aio.server(
        options=[*GRPC_OPTIONS, *limits], interceptors=[*authentication, RequestDecoding(), *interceptors]
    )
    health = HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    return server, health


async def mark_serving(health: HealthServicer, service_names: list[str], serving: bool = True) -> None:
    status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
    for name in ["", *service_names]:
        await health.set(name, status)


def run_process(
    main: Coroutine[Any, Any, None], *, run: Callable[[Coroutine[Any, Any, None]], None] = asyncio.run
) -> NoReturn:
    """A service process's whole life: `main` (run_service's start and stop sequence), then the
    process ends at once. By then the service has closed what it owns (logs written and synced,
    registration and leases given up, servers stopped); the interpreter's own teardown (a full
    collection of every object and module, idle threads joined) added 0.2-0.4 s to each process's
    exit, and every group of a cluster's orderly stop waits on its slowest. A failure still raises
    out of here with its traceback and exit status 1."""
    run(main)
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


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


class ServiceParts(Protocol):
    """What one service adds to the shared start/stop sequence of `run_service`."""

    def add_to(self, server: grpc.aio.Server) -> list[str]:
        """Add the servicers; the gRPC service names health reports on."""
        ...

    async def start(self) -> None:
        """The server is listening: register, start background work."""
        ...

    async def drain(self) -> None:
        """SIGTERM, still serving: hand work away (controlled shutdown)."""
        ...

    async def leave(self) -> None:
        """Health says NOT_SERVING, the server still answers: give up what others must take over."""
        ...

    async def close(self) -> None:
        """The server has stopped: release everything else."""
        ...


async def run_service(
    service: str,
    *,
    listen: str | None,
    metrics_port: int,
    build: Callable[[asyncio.Event], Awaitable[ServiceParts]],
    grace_s: float = 2.0,
    socket_request_max_bytes: int = GRPC_MESSAGE_BYTES_MAX,
    security: SecuritySettings | None = None,
    interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
    metrics_security: SecuritySettings | None = None,
    **context: object,
) -> None:
    """The one start/stop sequence of every gRPC service process.

    Logging, metrics and signal handling first; then `build(stopping)` makes the service (it may
    set `stopping` itself, e.g. a broker whose id another process took); the gRPC server with
    health starts, `start()`, SERVING, and the process runs until SIGTERM or SIGINT. Stopping:
    `drain()`, NOT_SERVING, `leave()`, the server stops (in-flight calls get `grace_s`), `close()`.
    /metrics is protected by the metrics.* settings of `metrics_security`, else of `security` (the
    gateway's gRPC listener is plain health while its metrics follow its settings).
    """
    configure_logging(service, **context)
    log = structlog.get_logger(service)
    # /metrics on the gRPC listener's address: on Kubernetes (--host 0.0.0.0) Prometheus scrapes the
    # pod's IP, which a loopback-only listener would refuse.
    metrics_host = listen.rsplit(":", 1)[0] if listen else "127.0.0.1"
    start_metrics(metrics_port, host=metrics_host, security=metrics_security or security)
    runtime_metrics.start()
    stopping = stop_on_signals()
    parts = await build(stopping)
    service_security: ServiceSecurity | None = getattr(parts, "service_security", None)
    authentication: list[grpc.aio.ServerInterceptor] = []
    if service_security is not None:
        await service_security.start()  # ACLs and credentials in force before the first call
        authentication = service_security.interceptors()
    server, health = grpc_server(socket_request_max_bytes, interceptors, authentication)
    names = parts.add_to(server)
    if service_security is not None:
        names += service_security.add_to(server)
    if listen is not None:  # None: a service that serves elsewhere (the gateway's HTTP) and wants no health port
        if security is not None and security.tls:
            server.add_secure_port(listen, server_credentials(security))
        else:
            server.add_insecure_port(listen)
    await server.start()
    await parts.start()
    await mark_serving(health, names)
    log.info(f"{service}_started", endpoint=listen)
    await stopping.wait()
    log.info(f"{service}_stopping")
    steps = _StopSteps(service)  # each step's seconds, logged: where a slow stop spends its time
    await parts.drain()
    steps.done("drain")
    await mark_serving(health, names, serving=False)
    await parts.leave()
    steps.done("leave")
    await server.stop(grace=grace_s)
    steps.done("server_stop")
    await parts.close()
    if service_security is not None:
        await service_security.close()
    steps.done("close")
    log.info(f"{service}_stopped", seconds=steps.seconds)


class _StopSteps:
    def __init__(self, service: str) -> None:
        self.service = service
        self.started = self.last = time.monotonic()
        self.seconds: dict[str, float] = {}

    def done(self, step: str) -> None:
        now = time.monotonic()
        self.seconds[step] = round(now - self.last, 3)
        self.last = now
