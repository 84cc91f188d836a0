"""The gateway's ASGI application: routes, error answers, middlewares and the OpenAPI document.

Middlewares, outermost first: request metrics → authentication → forwarding of consumer-instance
requests to the replica holding the instance → the produce fast path → the routes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx
import structlog
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from starlette.exceptions import HTTPException
from starlette.responses import Response
from starlette.types import ASGIApp

from tidelog.gateway import consumer_routes, produce_routes, topic_routes, v3_routes
from tidelog.gateway.access import Authentication
from tidelog.gateway.gateway_context import GatewayContext
from tidelog.gateway.gateway_metrics import RequestMetrics
from tidelog.gateway.instance_forwarding import InstanceForwarding
from tidelog.gateway.produce_routes import ProduceFastPath
from tidelog.gateway.responses import ERROR_RESPONSES, KafkaV2Response, error_response, json_response
from tidelog.gateway.rest_errors import KAFKA_ERROR, UNPROCESSABLE, RestError
from tidelog.gateway.rest_models import RestErrorBody
from tidelog.gateway.scram_basic import ScramBasic

__all__ = ["create_app"]

log = structlog.get_logger(__name__)


def _routes(context: GatewayContext) -> FastAPI:
    app = FastAPI(
        title="Tidelog REST gateway",
        version="2",
        description="Confluent REST Proxy v2 compatible produce and consume, plus v3 record produce.",
        default_response_class=KafkaV2Response,
        responses=ERROR_RESPONSES,
    )
    app.state.context = context
    for module in (topic_routes, produce_routes, consumer_routes, v3_routes):
        app.include_router(module.router)

    @app.get("/healthz", include_in_schema=False)
    async def health() -> Response:
        return json_response({"status": "ok"}, media_type="application/json")

    @app.get("/", summary="Root (REST Proxy answers {} here)", response_model=dict[str, str])
    async def root() -> Response:
        return json_response({})

    @app.exception_handler(RestError)
    async def rest_error(_: Request, error: Exception) -> Response:
        assert isinstance(error, RestError)
        return error_response(error)

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, error: Exception) -> Response:
        assert isinstance(error, RequestValidationError)
        where = "; ".join(
            f"{'.'.join(str(part) for part in problem['loc'])}: {problem['msg']}" for problem in error.errors()[:5]
        )
        return error_response(RestError(UNPROCESSABLE, f"invalid request: {where}"))

    @app.exception_handler(Exception)
    async def unexpected(_: Request, error: Exception) -> Response:
        # Still REST Proxy's error body (FastAPI's default is plain text); the cause is in the log.
        log.exception("request_failed", error=repr(error))
        return error_response(RestError(KAFKA_ERROR, f"internal error: {type(error).__name__}: {error}"))

    @app.exception_handler(HTTPException)
    async def http_error(_: Request, error: Exception) -> Response:
        assert isinstance(error, HTTPException)
        return error_response(RestError(error.status_code, f"HTTP {error.status_code} {error.detail}"))

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
            schemas = document.setdefault("components", {}).setdefault("schemas", {})
            schemas["RestErrorBody"] = RestErrorBody.model_json_schema()
            for path in document["paths"].values():
                for operation in path.values():
                    schemas.update(operation.pop("x-tidelog-schemas", {}))
            app.openapi_schema = document
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app


def create_app(
    context: GatewayContext,
    *,
    credentials: Mapping[str, str],
    forward_client: httpx.AsyncClient,
    basic: ScramBasic | None = None,
) -> tuple[FastAPI, ASGIApp]:
    """(the FastAPI app, the whole ASGI stack to serve)."""
    app = _routes(context)
    stack: ASGIApp = ProduceFastPath(app, context)
    stack = InstanceForwarding(stack, context.registry, forward_client)
    stack = Authentication(stack, credentials, basic)
    return app, RequestMetrics(stack)
