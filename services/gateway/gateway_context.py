"""What the routes share: the clients over the cluster, the instance registry, the settings."""

from __future__ import annotations

import dataclasses

from fastapi import Request
from starlette.types import Scope

from tidelog.client import AdminClient, Consumer, Producer
from tidelog.client.connections import Connections
from tidelog.common.settings import GatewaySettings
from tidelog.gateway.access import ANONYMOUS
from tidelog.gateway.instance_registry import InstanceRegistry
from tidelog.gateway.principal_clients import ClientsByPrincipal

__all__ = ["GatewayContext", "context", "principal"]


@dataclasses.dataclass(slots=True)
class GatewayContext:
    settings: GatewaySettings
    bootstrap: list[str]
    connections: Connections
    producer: Producer
    admin: AdminClient
    offsets: Consumer  # assigned nothing: used for ListOffsets only
    registry: InstanceRegistry
    cluster_id: str
    principals: ClientsByPrincipal | None = None  # set: each REST principal acts as itself

    def for_caller(self, scope: Scope) -> GatewayContext:
        """The context of one request: its principal's clients when principals propagate."""
        if self.principals is None:
            return self
        state = scope.get("state", {})
        principal = state.get("principal", ANONYMOUS)
        client = scope.get("client")
        clients = self.principals.get(principal, client[0] if client else "*")
        return dataclasses.replace(
            self,
            connections=clients.connections,
            producer=clients.producer,
            admin=clients.admin,
            offsets=clients.offsets,
        )


async def context(request: Request) -> GatewayContext:
    found: GatewayContext = request.app.state.context
    return found.for_caller(request.scope)


async def principal(request: Request) -> str:
    name: str = request.scope.get("state", {}).get("principal", ANONYMOUS)  # set by access.Authentication
    return name
