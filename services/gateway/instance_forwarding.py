"""Any replica answers for any consumer instance: a request for an instance held by another gateway
is forwarded there, body and headers as received, and its answer streamed back.

The holder is found in etcd (instance_registry.py). A forwarded request carries
`X-Tidelog-Forwarded`, and a gateway never forwards such a request again: a stale registration
answers 40403 rather than bouncing between replicas.
"""

from __future__ import annotations

import re
from typing import Final

import httpx
import structlog
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from tidelog.gateway.instance_registry import InstanceRegistry
from tidelog.gateway.responses import error_response
from tidelog.gateway.rest_errors import KAFKA_RETRIABLE_ERROR, RestError

__all__ = ["FORWARDED_HEADER", "InstanceForwarding"]

log = structlog.get_logger(__name__)

FORWARDED_HEADER: Final = "x-tidelog-forwarded"
_INSTANCE_PATH: Final = re.compile(r"^/consumers/(?P<group>[^/]+)/instances/(?P<name>[^/]+)(/.*)?$")
_HOP_BY_HOP: Final = frozenset(
    {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "host", "content-length"}
)


class InstanceForwarding:
    """ASGI middleware in front of the routes."""

    def __init__(self, app: ASGIApp, registry: InstanceRegistry, client: httpx.AsyncClient) -> None:
        self.app = app
        self.registry = registry
        self.client = client

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            match = _INSTANCE_PATH.match(scope["path"])
            if (
                match is not None
                and (match["group"], match["name"]) not in self.registry.local
                and not any(name == FORWARDED_HEADER.encode() for name, _ in scope["headers"])
            ):
                owner = await self.registry.owner(match["group"], match["name"])
                if owner is not None and owner.gateway_id != self.registry.gateway_id:
                    await self._forward(owner.url, scope, receive, send)
                    return
        await self.app(scope, receive, send)

    async def _forward(self, base_url: str, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        headers = {name: value for name, value in request.headers.items() if name.lower() not in _HOP_BY_HOP} | {
            FORWARDED_HEADER: "1"
        }
        outgoing = self.client.build_request(
            request.method,
            base_url.rstrip("/") + scope["path"],
            params=str(request.query_params),
            headers=headers,
            content=request.stream(),
        )
        try:
            answer = await self.client.send(outgoing, stream=True)
        except httpx.HTTPError as error:
            log.warning("forward_failed", url=base_url, error=repr(error))
            await error_response(
                RestError(KAFKA_RETRIABLE_ERROR, f"the gateway holding this consumer instance did not answer: {error}")
            )(scope, receive, send)
            return
        response = StreamingResponse(
            answer.aiter_raw(),
            status_code=answer.status_code,
            headers={name: value for name, value in answer.headers.items() if name.lower() not in _HOP_BY_HOP},
            background=None,
        )
        try:
            await response(scope, receive, send)
        finally:
            await answer.aclose()
