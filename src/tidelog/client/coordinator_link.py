"""The client's way to the group coordinator serving a group, or to the transaction coordinator
serving a transactional.id (FindCoordinator through any broker).

Shared by GroupConsumer, GroupAdmin and the transactional producer. A request meeting
NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS or an unreachable instance
looks the coordinator up again and retries, within `request.timeout.ms` plus the request's own wait.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, Final

import grpc

from tidelog.client.client_logging import get_logger
from tidelog.client.cluster_metadata import ClusterMetadata
from tidelog.client.connections import Connections
from tidelog.common.errors import ErrorCode, error_for
from tidelog.v1 import coordinator_pb2, coordinator_pb2_grpc

__all__ = ["REDISCOVER_CODES", "CoordinatorLink"]

log = get_logger(__name__)

REDISCOVER_CODES: Final = frozenset(
    {ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS}
)
_REFUSALS: Final = frozenset({ErrorCode.GROUP_AUTHORIZATION_FAILED, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED})


class CoordinatorLink:
    def __init__(
        self,
        group_id: str,
        metadata: ClusterMetadata,
        connections: Connections,
        *,
        request_timeout_s: float,
        retry_backoff_s: float,
        transactional_id: str = "",
        stub_type: Callable[[grpc.aio.Channel], Any] = coordinator_pb2_grpc.CoordinatorStub,
    ) -> None:
        """For a transaction coordinator: an empty `group_id`, the `transactional_id`, and its stub type."""
        self.group_id = group_id
        self.transactional_id = transactional_id
        self.stub_type = stub_type
        self.what = f"transactional.id {transactional_id!r}" if transactional_id else f"group {group_id!r}"
        self.metadata = metadata
        self.connections = connections
        self.request_timeout_s = request_timeout_s
        self.retry_backoff_s = retry_backoff_s
        self.endpoint = ""

    async def stub(self) -> Any:
        deadline = time.monotonic() + self.request_timeout_s
        request = coordinator_pb2.FindCoordinatorRequest(group_id=self.group_id, transactional_id=self.transactional_id)
        while not self.endpoint:
            for broker in [*self.metadata.bootstrap, *self.metadata.brokers.values()]:
                try:
                    found = await self.connections.broker(broker).FindCoordinator(
                        request, timeout=self.request_timeout_s
                    )
                except grpc.aio.AioRpcError:
                    continue
                if found.error_code == 0:
                    self.endpoint = found.endpoint
                    break
                if found.error_code in _REFUSALS:  # asking again cannot help
                    raise error_for(found.error_code, found.error_message)
            if not self.endpoint:
                if time.monotonic() > deadline:
                    raise error_for(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"no coordinator for {self.what}")
                await asyncio.sleep(self.retry_backoff_s)
        return self.stub_type(self.connections.channel(self.endpoint))

    async def call(self, method: str, request: object, *, timeout_s: float | None = None) -> Any:
        """One request; returns the response (its error_code is the caller's to read)."""
        deadline = time.monotonic() + self.request_timeout_s + (timeout_s or 0)
        while True:
            stub = await self.stub()
            try:
                response = await getattr(stub, method)(request, timeout=timeout_s or self.request_timeout_s)
            except grpc.aio.AioRpcError as error:
                log.info("coordinator_unreachable", endpoint=self.endpoint, code=error.code().name)
                self.endpoint = ""
                response = None
            code = getattr(response, "error_code", 0)
            if response is not None and code not in REDISCOVER_CODES:
                return response
            if response is not None and code != ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
                self.endpoint = ""
            if time.monotonic() > deadline:
                if response is not None:
                    raise error_for(code, response.error_message)
                raise error_for(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{self.what}: coordinator gone")
            await asyncio.sleep(self.retry_backoff_s)
