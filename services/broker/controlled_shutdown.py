"""A broker stopping cleanly hands its leaderships away first (Kafka's controlled shutdown).

Before revoking its etcd lease the broker asks the active controller to move every partition it
leads to another in-sync replica and to take it out of the ISRs; the controller answers once the
new leaders have their LeaderAndIsr, so clients fail over to a serving leader instead of waiting
for an election. Partitions nobody else can lead (no other replica in sync) stay; the broker then
stops anyway. A controller that cannot be reached is asked again `controlled.shutdown.max.retries`
times, `controlled.shutdown.retry.backoff.ms` apart.
"""

from __future__ import annotations

import asyncio

import grpc
import structlog

from tidelog.broker.metadata_cache import MetadataCache
from tidelog.common.channels import ChannelPool
from tidelog.common.errors import ErrorCode
from tidelog.v1 import controller_pb2, controller_pb2_grpc

__all__ = ["controlled_shutdown"]

log = structlog.get_logger(__name__)

REQUEST_TIMEOUT_S = 15.0


async def controlled_shutdown(
    metadata: MetadataCache,
    broker_id: int,
    incarnation: str,
    *,
    max_retries: int,
    backoff_ms: int,
    channels: ChannelPool,
) -> bool:
    """True when the controller moved what it could; False when it could not be reached."""
    request = controller_pb2.ControlledShutdownRequest(broker_id=broker_id, broker_incarnation=incarnation)
    endpoint = metadata.controller_endpoint
    for attempt in range(max_retries + 1):
        if attempt:
            await asyncio.sleep(backoff_ms / 1000)
        if not endpoint:
            endpoint = metadata.controller_endpoint
            if not endpoint:
                continue
        try:
            response = await controller_pb2_grpc.ControllerStub(channels.channel(endpoint)).ControlledShutdown(
                request, timeout=REQUEST_TIMEOUT_S
            )
        except grpc.aio.AioRpcError as error:
            log.info("controlled_shutdown_failed", attempt=attempt, code=error.code().name)
            endpoint = ""
            continue
        if response.error_code == ErrorCode.NOT_CONTROLLER:
            endpoint = response.controller_endpoint
            continue
        if response.error_code:
            log.warning("controlled_shutdown_refused", error=ErrorCode(response.error_code).name)
            return False
        log.info(
            "controlled_shutdown_done",
            still_leading=[f"{ref.topic}-{ref.partition}" for ref in response.remaining],
        )
        return True
    return False
