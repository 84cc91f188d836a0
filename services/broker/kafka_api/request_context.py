"""What a Kafka-protocol request is served with: the connection's peer, client id and principal,
shaped as the gRPC servicer context `BrokerService` reads (`peer()`, `invocation_metadata()`,
`abort()`), so both listeners share one authorisation and quota path."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any, NoReturn

from tidelog.broker.kafka_api.listener_security import ConnectionLogin
from tidelog.broker.kafka_api.produce_sequences import ProduceSequences
from tidelog.common.security.quotas.quota import CLIENT_ID_METADATA
from tidelog.server_common.security.authorization.access_control import (
    ON_BEHALF_OF_HOST,
    ON_BEHALF_OF_PRINCIPAL,
    AccessControl,
)

__all__ = ["KafkaRequestContext", "RequestAbortedError", "on_behalf_of"]


class RequestAbortedError(Exception):
    """A service method refused the whole request (as gRPC's `context.abort`): the listener closes
    the connection, and the client reconnects or asks another broker."""


@dataclasses.dataclass(slots=True)
class KafkaRequestContext:
    """One request's: the connection's peer, the request's client id, and `release`, which the
    handler sets as soon as the connection's next request may start (a Produce once its batches
    are in the logs, a Fetch at once; otherwise the listener sets it when the handler ends)."""

    host: str
    port: int
    client_id: str = ""
    release: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    login: ConnectionLogin | None = None  # the connection's (shared by its requests' contexts)
    produce_sequences: ProduceSequences | None = None  # the connection's (produce_sequences.py)

    def peer(self) -> str:
        return f"ipv6:[{self.host}]:{self.port}" if ":" in self.host else f"ipv4:{self.host}:{self.port}"

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return ((CLIENT_ID_METADATA, self.client_id),) if self.client_id else ()

    async def abort(self, code: Any, details: str = "") -> NoReturn:
        raise RequestAbortedError(f"{code}: {details}")


def on_behalf_of(access: AccessControl, context: KafkaRequestContext) -> tuple[tuple[str, str], ...]:
    """Metadata that names the Kafka client to a coordinator or controller this broker forwards its
    request to, so that the client's ACLs decide there (none without an authorizer)."""
    if not access.enabled:
        return ()
    caller = access.caller(context)
    return ((ON_BEHALF_OF_PRINCIPAL, str(caller.principal)), (ON_BEHALF_OF_HOST, caller.host))
