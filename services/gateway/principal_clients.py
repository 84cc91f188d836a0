"""The gateway's cluster clients per REST principal (principal propagation).

With `rest.principal.propagation.enable`, a REST caller's requests reach the cluster under its own
principal: each principal (and caller address) gets its own connections, which name it with every
call (`tidelog-on-behalf-of`), and its own producer and admin client, so its ACLs decide and its
records never share a produce request with another principal's. The services believe the name
only from a gateway identity (`gateway.principals`). The least recently used sets are closed
beyond `rest.principal.clients.max`, after a grace period for calls still under way.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
from typing import Final

import structlog

from tidelog.client import AdminClient, Consumer, Producer
from tidelog.client.connections import Connections
from tidelog.common.settings import GatewaySettings, SecuritySettings
from tidelog.server_common.security.authorization.access_control import ON_BEHALF_OF_HOST, ON_BEHALF_OF_PRINCIPAL

__all__ = ["ClientsByPrincipal", "PrincipalClients", "kafka_principal"]

log = structlog.get_logger(__name__)

EVICTED_CLOSE_DELAY_S: Final = 60.0


def kafka_principal(rest_principal: str) -> str:
    """A REST principal as the cluster names it: `alice` → `User:alice` (`User:x` stays)."""
    return rest_principal if ":" in rest_principal else f"User:{rest_principal}"


@dataclasses.dataclass(slots=True)
class PrincipalClients:
    connections: Connections
    producer: Producer
    admin: AdminClient
    offsets: Consumer

    async def close(self) -> None:
        await self.producer.close()  # flushes what was accepted
        await self.admin.close()
        await self.offsets.close()
        await self.connections.close()


class ClientsByPrincipal:
    def __init__(self, bootstrap: list[str], security: SecuritySettings, settings: GatewaySettings) -> None:
        self.bootstrap = bootstrap
        self.security = security
        self.settings = settings
        self._clients: collections.OrderedDict[tuple[str, str], PrincipalClients] = collections.OrderedDict()
        self._closing: set[asyncio.Task[None]] = set()

    def get(self, principal: str, host: str) -> PrincipalClients:
        key = (kafka_principal(principal), host)
        clients = self._clients.get(key)
        if clients is not None:
            self._clients.move_to_end(key)
            return clients
        connections = Connections(
            self.security, call_metadata=((ON_BEHALF_OF_PRINCIPAL, key[0]), (ON_BEHALF_OF_HOST, host))
        )
        clients = PrincipalClients(
            connections,
            Producer(self.bootstrap, linger_ms=self.settings.producer_linger_ms, connections=connections),
            AdminClient(self.bootstrap, connections=connections),
            Consumer(self.bootstrap, connections=connections),
        )
        self._clients[key] = clients
        while len(self._clients) > self.settings.rest_principal_clients_max:
            _, evicted = self._clients.popitem(last=False)
            task = asyncio.get_running_loop().create_task(self._close_later(evicted))
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)
        return clients

    @staticmethod
    async def _close_later(clients: PrincipalClients) -> None:
        await asyncio.sleep(EVICTED_CLOSE_DELAY_S)  # calls under way with these clients finish first
        await clients.close()

    async def close(self) -> None:
        for task in list(self._closing):
            task.cancel()
        for clients in list(self._clients.values()):
            await clients.close()
        self._clients.clear()
