"""A Kafka listener of its own on loopback, with no cluster behind it: what a test puts in
`service` is all its requests reach."""

from __future__ import annotations

import contextlib
import types
from collections.abc import AsyncIterator
from typing import Any

from tidelog.broker.kafka_api.listener import KafkaListener
from tidelog.common.channels import ChannelPool
from tidelog.common.settings import SecuritySettings

__all__ = ["listening"]


@contextlib.asynccontextmanager
async def listening(service: Any = None, *, idle_ms: int = 600_000) -> AsyncIterator[int]:
    """The port of a listener serving `service` (nothing: requests that never reach one)."""
    security = SecuritySettings.from_configs({})
    served = KafkaListener(
        service if service is not None else types.SimpleNamespace(),
        1,
        "cluster",
        ChannelPool(security),
        request_max_bytes=1 << 20,
        connections_max=2,
        idle_ms=idle_ms,
        security=security,
    )
    try:
        yield await served.start("127.0.0.1", 0)
    finally:
        await served.close()
