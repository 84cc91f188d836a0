"""Prometheus metrics of the gateway: requests by route template and status, their latency, and
records produced and consumed."""

from __future__ import annotations

import time
from typing import Final

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tidelog.server_common import metrics_catalog

__all__ = ["RECORDS_CONSUMED", "RECORDS_PRODUCED", "RequestMetrics"]

REQUESTS: Final = metrics_catalog.counter("tidelog_gateway_requests_total")
LATENCY: Final = metrics_catalog.histogram(
    "tidelog_gateway_request_seconds",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
RECORDS_PRODUCED: Final = metrics_catalog.counter("tidelog_gateway_records_produced_total")
RECORDS_CONSUMED: Final = metrics_catalog.counter("tidelog_gateway_records_consumed_total")


class RequestMetrics:
    """ASGI middleware. The route is the matched path template (never the raw path, whose topic
    and instance names would make a label per value)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                route = scope.get("route")
                template = getattr(route, "path", "unmatched")
                LATENCY.labels(scope["method"], template).observe(time.perf_counter() - started)
                REQUESTS.labels(scope["method"], template, str(status)).inc()
            await send(message)

        await self.app(scope, receive, sending)
