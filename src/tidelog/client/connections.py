"""gRPC channels to brokers and controllers, one per endpoint, shared by a client's parts."""

from __future__ import annotations

import grpc

from tidelog.common.runtime import GRPC_OPTIONS
from tidelog.v1 import broker_pb2_grpc, controller_pb2_grpc

__all__ = ["Connections"]


class Connections:
    def __init__(self) -> None:
        self._channels: dict[str, grpc.aio.Channel] = {}

    def channel(self, endpoint: str) -> grpc.aio.Channel:
        if endpoint not in self._channels:
            self._channels[endpoint] = grpc.aio.insecure_channel(endpoint, options=GRPC_OPTIONS)
        return self._channels[endpoint]

    def broker(self, endpoint: str) -> broker_pb2_grpc.BrokerStub:
        return broker_pb2_grpc.BrokerStub(self.channel(endpoint))

    def controller(self, endpoint: str) -> controller_pb2_grpc.ControllerStub:
        return controller_pb2_grpc.ControllerStub(self.channel(endpoint))

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()
        self._channels.clear()
