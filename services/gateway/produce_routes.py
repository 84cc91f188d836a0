"""v2 produce: `POST /topics/{topic}` and `POST /topics/{topic}/partitions/{partition}`."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from starlette.responses import Response

from tidelog.gateway.embedded_format import EmbeddedFormat, produce_format
from tidelog.gateway.gateway_context import GatewayContext, context
from tidelog.gateway.gateway_metrics import RECORDS_PRODUCED
from tidelog.gateway.producing import decode_records, produce
from tidelog.gateway.request_body import body_schema, read_model
from tidelog.gateway.responses import ERROR_RESPONSES, KafkaV2Response, json_response
from tidelog.gateway.rest_errors import UNPROCESSABLE, RestError
from tidelog.gateway.rest_models import BinaryProduceBody, ProduceBody, ProduceResponse
from tidelog.gateway.topic_routes import PartitionId, TopicName

__all__ = ["router"]

router = APIRouter(tags=["produce (v2)"], default_response_class=KafkaV2Response, responses=ERROR_RESPONSES)
Context = Annotated[GatewayContext, Depends(context)]
_BODY = body_schema(
    ProduceBody,
    EmbeddedFormat.JSON.content_type,
    "application/json",
    by_type={EmbeddedFormat.BINARY.content_type: BinaryProduceBody},
)


async def _produce(request: Request, ctx: GatewayContext, topic: str, partition: int | None) -> Response:
    embedded = produce_format(request.headers.get("content-type"))
    model = BinaryProduceBody if embedded is EmbeddedFormat.BINARY else ProduceBody
    body = await read_model(request, model, ctx.limits.rest_request_max_bytes)
    if len(body.records) > ctx.limits.produce_records_max:
        raise RestError(
            UNPROCESSABLE, f"{len(body.records)} records exceed produce.records.max={ctx.limits.produce_records_max}"
        )
    records = decode_records(body.records, embedded)
    if partition is not None:
        for record in records:
            record.partition = partition
    offsets = await produce(ctx.producer, ctx.producer.metadata, topic, records)
    RECORDS_PRODUCED.inc(sum(1 for entry in offsets if entry["error_code"] is None))
    return json_response({"key_schema_id": None, "value_schema_id": None, "offsets": offsets})


@router.post(
    "/topics/{topic}",
    summary="Produce records to a topic",
    response_model=ProduceResponse,
    openapi_extra=_BODY,
)
async def produce_to_topic(topic: TopicName, request: Request, ctx: Context) -> Response:
    return await _produce(request, ctx, topic, None)


@router.post(
    "/topics/{topic}/partitions/{partition}",
    summary="Produce records to one partition",
    response_model=ProduceResponse,
    openapi_extra=_BODY,
)
async def produce_to_partition(topic: TopicName, partition: PartitionId, request: Request, ctx: Context) -> Response:
    return await _produce(request, ctx, topic, partition)
