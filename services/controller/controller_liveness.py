"""Knowing fast that the active controller's process is gone (the election's death watch).

A standby learns of the active controller's death from etcd when its lease expires: up to
controller.session.timeout.ms after a kill -9. The process's death is visible sooner: its gRPC
health stream ends the moment the kernel closes its sockets, and its port then refuses
connections (the host is up, nothing listens). Refused, several times in a row over
CONFIRM_S, is taken as dead: the election revokes the lease at once. A controller listens before
it campaigns and stops listening only after it resigned, so a live leader never refuses.

A host that vanished (power, network) refuses nothing: connects time out, and the lease's expiry
decides as before. A firewall that rejects (TCP reset) between two live controllers would look
like death and cost a needless failover, never two leaders: the deposed one's fenced writes fail.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Final

import grpc
import structlog
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tidelog.common.channels import ChannelPool
from tidelog.server_common.metadata import ControllerRecord

__all__ = ["ControllerLiveness"]

log = structlog.get_logger(__name__)

CONFIRMATIONS: Final = 3  # refused connects in a row
CONFIRM_S: Final = 0.15  # spread over this long
CONNECT_TIMEOUT_S: Final = 1.0
REWATCH_S: Final = 1.0  # the health stream ended but the port answers: watch again after this


class ControllerLiveness:
    def __init__(self, channels: ChannelPool) -> None:
        self._channels = channels

    async def dead(self, record_json: bytes) -> None:
        """Return once the controller that campaigned with `record_json` is known dead."""
        endpoint = ControllerRecord.from_json(record_json).endpoint
        while True:
            await self._stream_ends(endpoint)
            if await refuses_connections(endpoint):
                log.warning("controller_process_gone", endpoint=endpoint)
                return
            await asyncio.sleep(REWATCH_S)

    async def _stream_ends(self, endpoint: str) -> None:
        stub = health_pb2_grpc.HealthStub(self._channels.channel(endpoint))
        call = stub.Watch(health_pb2.HealthCheckRequest(service=""))
        try:
            async for _ in call:
                pass
        except grpc.aio.AioRpcError:
            pass
        finally:
            call.cancel()


async def refuses_connections(endpoint: str) -> bool:
    """Every one of CONFIRMATIONS TCP connects to `endpoint`, over CONFIRM_S, refused."""
    host, port = endpoint.rsplit(":", 1)
    for attempt in range(CONFIRMATIONS):
        if attempt:
            await asyncio.sleep(CONFIRM_S / (CONFIRMATIONS - 1))
        try:
            _, writer = await asyncio.wait_for(asyncio.open_connection(host.strip("[]"), int(port)), CONNECT_TIMEOUT_S)
        except ConnectionRefusedError:
            continue
        except (OSError, TimeoutError):
            return False  # unreachable or slow is not dead: the lease decides
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()
        return False
    return True
