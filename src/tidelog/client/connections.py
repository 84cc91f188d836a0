"""gRPC channels to brokers and controllers, one per endpoint, shared by a client's parts."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import grpc

from tidelog.common.channels import ChannelPool
from tidelog.common.security.quotas.quota import CLIENT_ID_METADATA
from tidelog.common.settings import SecuritySettings
from tidelog.v1 import broker_pb2_grpc, controller_pb2_grpc

__all__ = ["Connections", "client_id_metadata", "security_settings"]


def client_id_metadata(client_id: str) -> tuple[tuple[str, str], ...]:
    return ((CLIENT_ID_METADATA, client_id),) if client_id else ()


def security_settings(security: SecuritySettings | Mapping[str, object] | None) -> SecuritySettings:
    """The client's `security=` argument: Kafka's names (`{"security.protocol": "SSL", ...}`) or
    settings already built; None is PLAINTEXT."""
    if isinstance(security, SecuritySettings):
        return security
    return SecuritySettings.from_configs(security or {})


class Connections:
    def __init__(
        self,
        security: SecuritySettings | Mapping[str, object] | None = None,
        *,
        call_metadata: Sequence[tuple[str, str]] = (),
    ) -> None:
        self.pool = ChannelPool(security_settings(security), call_metadata=call_metadata)

    def channel(self, endpoint: str) -> grpc.aio.Channel:
        return self.pool.channel(endpoint)

    def broker(self, endpoint: str) -> broker_pb2_grpc.BrokerStub:
        # A channel left failing while that broker was down waits out gRPC's reconnect backoff (up
        # to a second) and fails every call meanwhile, even once the broker is back and leads:
        # replaced, it connects at once. The callers' own backoffs pace the attempts.
        self.pool.forget_failed(endpoint)
        return broker_pb2_grpc.BrokerStub(self.channel(endpoint))

    def controller(self, endpoint: str) -> controller_pb2_grpc.ControllerStub:
        return controller_pb2_grpc.ControllerStub(self.channel(endpoint))

    async def close(self) -> None:
        await self.pool.close()
