"""v2 produce: `POST /topics/{topic}` and `POST /topics/{topic}/partitions/{partition}`."""

from __future__ import annotations

import re
from typing import Annotated, Final

import structlog
from fastapi import APIRouter, Depends, Request
from fastapi.routing import APIRoute
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from tidelog.gateway.embedded_format import METADATA_TYPE, EmbeddedFormat, produce_format
from tidelog.gateway.gateway_context import GatewayContext, context
from tidelog.gateway.gateway_metrics import RECORDS_PRODUCED
from tidelog.gateway.producing import decode_plain_records, decode_records, produce
from tidelog.gateway.request_body import body_schema, parse_model, read_bytes
from tidelog.gateway.responses import ERROR_RESPONSES, KafkaV2Response, error_response
from tidelog.gateway.rest_errors import KAFKA_ERROR, UNPROCESSABLE, RestError
from tidelog.gateway.rest_models import BinaryProduceBody, ProduceBody, ProduceResponse
from tidelog.gateway.topic_routes import PartitionId, TopicName

__all__ = ["ProduceFastPath", "produce_request", "router"]

log = structlog.get_logger(__name__)

router = APIRouter(tags=["produce (v2)"], default_response_class=KafkaV2Response, responses=ERROR_RESPONSES)
Context = Annotated[GatewayContext, Depends(context)]
_BODY = body_schema(
    ProduceBody,
    EmbeddedFormat.JSON.content_type,
    "application/json",
    by_type={EmbeddedFormat.BINARY.content_type: BinaryProduceBody},
)


async def produce_request(request: Request, ctx: GatewayContext, topic: str, partition: int | None) -> Response:
    embedded = produce_format(request.headers.get("content-type"))
    data = await read_bytes(request, ctx.settings.rest_request_max_bytes)
    records = decode_plain_records(data, embedded, ctx.settings.produce_records_max)
    if records is None:  # headers, timestamps, or something to refuse: the models say what
        model = BinaryProduceBody if embedded is EmbeddedFormat.BINARY else ProduceBody
        body = parse_model(data, model)
        if len(body.records) > ctx.settings.produce_records_max:
            raise RestError(
                UNPROCESSABLE,
                f"{len(body.records)} records exceed produce.records.max={ctx.settings.produce_records_max}",
            )
        records = decode_records(body.records, embedded)
    if partition is not None:
        records.partitions = [partition] * len(records)
    results = await produce(ctx.producer, ctx.producer.metadata, topic, records)
    RECORDS_PRODUCED.inc(results.produced())
    return Response(results.response_json(), media_type=METADATA_TYPE)


@router.post(
    "/topics/{topic}",
    summary="Produce records to a topic",
    response_model=ProduceResponse,
    openapi_extra=_BODY,
)
async def produce_to_topic(topic: TopicName, request: Request, ctx: Context) -> Response:
    return await produce_request(request, ctx, topic, None)


@router.post(
    "/topics/{topic}/partitions/{partition}",
    summary="Produce records to one partition",
    response_model=ProduceResponse,
    openapi_extra=_BODY,
)
async def produce_to_partition(topic: TopicName, partition: PartitionId, request: Request, ctx: Context) -> Response:
    return await produce_request(request, ctx, topic, partition)


_PRODUCE_PATH: Final = re.compile(r"^/topics/(?P<topic>[A-Za-z0-9._-]{1,249})(?:/partitions/(?P<partition>\d{1,7}))?$")


class ProduceFastPath:
    """ASGI middleware: produce requests go straight to `produce_request`, past the framework's
    routing, dependency solving and middleware layers, which cost as much CPU as the produce itself
    at a thousand small requests a second. The routes above stay for the OpenAPI document and
    answer the same way; `scope["route"]` is set so metrics label these requests by template."""

    def __init__(self, app: ASGIApp, context: GatewayContext) -> None:
        self.app = app
        self.context = context
        self.routes = {route.path: route for route in router.routes if isinstance(route, APIRoute)}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        match = _PRODUCE_PATH.match(scope["path"]) if scope["type"] == "http" and scope["method"] == "POST" else None
        if match is None:
            await self.app(scope, receive, send)
            return
        partition = match["partition"]
        scope["route"] = self.routes[
            "/topics/{topic}" if partition is None else "/topics/{topic}/partitions/{partition}"
        ]
        request = Request(scope, receive)
        try:
            response = await produce_request(
                request, self.context.for_caller(scope), match["topic"], None if partition is None else int(partition)
            )
        except RestError as error:
            response = error_response(error)
        except Exception as error:
            log.exception("produce_failed", topic=match["topic"])
            response = error_response(RestError(KAFKA_ERROR, f"internal error: {error!r}"))
        await response(scope, receive, send)
