"""A broker stopping cleanly hands its leaderships away first (Kafka's controlled shutdown).

Before revoking its etcd lease the broker asks the active controller to move every partition it
leads to another in-sync replica and to take it out of the ISRs; the controller answers once the
new leaders have their LeaderAndIsr, so clients fail over to a serving leader instead of waiting
for an election. Partitions nobody else can lead (no other replica in sync) stay; the broker then
stops anyway. A controller that cannot be reached is looked up again in etcd every 0.1 s (the one
it knew may have died a moment ago: its successor is asked as soon as it is elected) and the same
one asked again `controlled.shutdown.retry.backoff.ms` later, for `controlled.shutdown.max.retries`
backoffs in all.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Awaitable, Callable

import grpc
import structlog

from tidelog.broker.metadata_cache import MetadataCache
from tidelog.common.channels import ChannelPool
from tidelog.common.errors import ErrorCode
from tidelog.common.settings import BrokerSettings
from tidelog.v1 import controller_pb2, controller_pb2_grpc

__all__ = ["controlled_shutdown"]

log = structlog.get_logger(__name__)

REQUEST_TIMEOUT_S = 15.0
LOOKUP_INTERVAL_S = 0.1  # between two looks for the elected controller while none answers


async def controlled_shutdown(
    metadata: MetadataCache,
    broker_id: int,
    incarnation: str,
    settings: BrokerSettings,
    *,
    channels: ChannelPool,
    find_controller: Callable[[], Awaitable[str]] | None = None,
) -> bool:
    """True when the controller moved what it could; False when it could not be reached within
    controlled.shutdown.max.retries x controlled.shutdown.retry.backoff.ms. `find_controller` reads
    the elected controller's endpoint from etcd ("" if none): when the controller asked is gone,
    the one elected after it is asked as soon as etcd names it, rather than a whole backoff later."""
    request = controller_pb2.ControlledShutdownRequest(broker_id=broker_id, broker_incarnation=incarnation)
    loop = asyncio.get_running_loop()
    backoff_ms = settings.controlled_shutdown_retry_backoff_ms
    deadline = loop.time() + settings.controlled_shutdown_max_retries * backoff_ms / 1000
    endpoint = metadata.controller_endpoint
    failed, failed_at = "", -math.inf  # the endpoint the last attempt could not reach, and when
    while True:
        if endpoint and (endpoint != failed or loop.time() - failed_at >= backoff_ms / 1000):
            try:
                response = await controller_pb2_grpc.ControllerStub(channels.channel(endpoint)).ControlledShutdown(
                    request, timeout=REQUEST_TIMEOUT_S
                )
            except grpc.aio.AioRpcError as error:
                log.info("controlled_shutdown_failed", code=error.code().name, endpoint=endpoint)
                failed, failed_at = endpoint, loop.time()
            else:
                if response.error_code == ErrorCode.NOT_CONTROLLER and response.controller_endpoint:
                    endpoint = response.controller_endpoint
                    continue
                if response.error_code and response.error_code != ErrorCode.NOT_CONTROLLER:
                    log.warning("controlled_shutdown_refused", error=ErrorCode(response.error_code).name)
                    return False
                if not response.error_code:
                    log.info(
                        "controlled_shutdown_done",
                        still_leading=[f"{ref.topic}-{ref.partition}" for ref in response.remaining],
                    )
                    return True
        if loop.time() >= deadline:
            return False
        await asyncio.sleep(LOOKUP_INTERVAL_S)
        endpoint = ""
        if find_controller is not None:
            with contextlib.suppress(Exception):  # etcd unreachable too: what the last push said
                endpoint = await asyncio.wait_for(find_controller(), REQUEST_TIMEOUT_S)
        endpoint = endpoint or metadata.controller_endpoint
