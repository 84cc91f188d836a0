"""Knowing fast that a process is gone, before its etcd lease expires.

The lease of a killed process expires up to its session timeout after the kill (`controller.
session.timeout.ms`, `broker.session.timeout.ms`). The death itself is visible sooner: the
process's gRPC health stream ends the moment the kernel closes its sockets, and its port then
refuses connections (the host is up, nothing listens). Refused, CONFIRMATIONS times in a row over
CONFIRM_S, is taken as dead, and whoever watches revokes the lease at once: the key goes now
instead of a session TTL later, and everything that follows a lease's expiry follows as usual.

A host that vanished (power, network) refuses nothing: connects time out, and the lease's expiry
decides as before. A frozen process (SIGSTOP, a long pause) still holds its port: the kernel
accepts the connection, so it is not dead either, and is fenced when its lease expires. A firewall
that rejects (TCP reset) between two live processes would look like death and cost a needless
failover, never a lost write: a live process whose lease was revoked is fenced as when its lease
expires (ADR 0016).

Two watchers use this: a standby controller watches the active one (`ControllerLiveness`, for the
election), and the active controller watches every registered broker (`broker_liveness.py`).
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

__all__ = ["ControllerLiveness", "health_stream_ends", "process_gone", "refuses_connections"]

log = structlog.get_logger(__name__)

CONFIRMATIONS: Final = 3  # refused connects in a row
CONFIRM_S: Final = 0.15  # spread over this long
CONNECT_TIMEOUT_S: Final = 1.0
# The health stream ended but the port answers: watch again after FIRST_REWATCH_S, then waits
# growing to REWATCH_S while the stream keeps ending at once (a stream that lived that long
# starts the waits over). A killed process closes its descriptors one by one: the stream's
# connection can close a moment before its listening socket, and a connect in that moment is
# accepted. Waiting the whole REWATCH_S after it cost 1 s of a controller failover in 2 of 4
# kills at 10,000 partitions (the stream ended 17 ms after the kill, a connect at 18 ms was accepted).
FIRST_REWATCH_S: Final = 0.02
REWATCH_S: Final = 1.0


async def process_gone(channels: ChannelPool, endpoint: str) -> None:
    """Return once the process serving `endpoint` is known dead (never, while it lives)."""
    loop = asyncio.get_running_loop()
    wait_s = FIRST_REWATCH_S
    while True:
        watched = loop.time()
        await health_stream_ends(channels, endpoint)
        if await refuses_connections(endpoint):
            return
        if loop.time() - watched >= REWATCH_S:
            wait_s = FIRST_REWATCH_S  # it lived between: a new ending starts the waits over
        await asyncio.sleep(wait_s)
        wait_s = min(wait_s * 4, REWATCH_S)


async def health_stream_ends(channels: ChannelPool, endpoint: str) -> None:
    """Watch the process's gRPC health until the stream ends (a death, a restart, a network fault)."""
    stub = health_pb2_grpc.HealthStub(channels.channel(endpoint))
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


class ControllerLiveness:
    """The election's death watch: a standby learns that the active controller's process is gone.
    A controller listens before it campaigns and stops listening only after it resigned, so a live
    leader never refuses."""

    def __init__(self, channels: ChannelPool) -> None:
        self._channels = channels

    async def dead(self, record_json: bytes) -> None:
        """Return once the controller that campaigned with `record_json` is known dead."""
        endpoint = ControllerRecord.from_json(record_json).endpoint
        await process_gone(self._channels, endpoint)
        log.warning("controller_process_gone", endpoint=endpoint)
