"""What the routes share: the clients over the cluster, the instance registry, the limits."""

from __future__ import annotations

import dataclasses

from fastapi import Request

from tidelog.client import AdminClient, Consumer, Producer
from tidelog.client.connections import Connections
from tidelog.gateway.access import ANONYMOUS
from tidelog.gateway.instance_registry import InstanceRegistry

__all__ = ["GatewayContext", "GatewayLimits", "context", "principal"]


@dataclasses.dataclass(frozen=True, slots=True)
class GatewayLimits:
    """The gateway's settings, named as in docs/configuration.md (scope gateway)."""

    consumer_instance_timeout_ms: int = 300_000
    consumer_request_timeout_ms: int = 1000
    consumer_request_max_bytes: int = 64 * 1024 * 1024
    consumer_instances_max: int = 1000
    rest_request_max_bytes: int = 16 * 1024 * 1024
    produce_records_max: int = 10_000


@dataclasses.dataclass(slots=True)
class GatewayContext:
    limits: GatewayLimits
    bootstrap: list[str]
    connections: Connections
    producer: Producer
    admin: AdminClient
    offsets: Consumer  # assigned nothing: used for ListOffsets only
    registry: InstanceRegistry
    cluster_id: str


async def context(request: Request) -> GatewayContext:
    found: GatewayContext = request.app.state.context
    return found


async def principal(request: Request) -> str:
    name: str = request.scope.get("state", {}).get("principal", ANONYMOUS)  # set by access.Authentication
    return name
