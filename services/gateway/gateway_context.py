"""What the routes share: the clients over the cluster, the instance registry, the settings."""

from __future__ import annotations

import dataclasses

from fastapi import Request

from tidelog.client import AdminClient, Consumer, Producer
from tidelog.client.connections import Connections
from tidelog.common.settings import GatewaySettings
from tidelog.gateway.access import ANONYMOUS
from tidelog.gateway.instance_registry import InstanceRegistry

__all__ = ["GatewayContext", "context", "principal"]


@dataclasses.dataclass(slots=True)
class GatewayContext:
    limits: GatewaySettings
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
