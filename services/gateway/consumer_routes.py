"""v2 consumers: instances, subscription, assignments, records (and a Server-Sent Events stream),
offsets, positions."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Depends, Path, Query, Request
from starlette.responses import Response, StreamingResponse

from tidelog.client import TopicPartition
from tidelog.gateway.consumer_instances import ConsumerInstance, Mode
from tidelog.gateway.embedded_format import METADATA_TYPE, EmbeddedFormat, accepted_format, check_metadata_content_type
from tidelog.gateway.gateway_context import GatewayContext, context, principal
from tidelog.gateway.gateway_metrics import RECORDS_CONSUMED
from tidelog.gateway.request_body import body_schema, parse_model, read_bytes
from tidelog.gateway.responses import ERROR_RESPONSES, KafkaV2Response, json_response
from tidelog.gateway.rest_errors import INVALID_CONSUMER_CONFIG, UNPROCESSABLE, RestError
from tidelog.gateway.rest_models import (
    CommittedOffsets,
    ConsumerCreated,
    CreateConsumer,
    OffsetsBody,
    PartitionsBody,
    Subscription,
    SubscriptionBody,
)

__all__ = ["router"]

router = APIRouter(tags=["consumers (v2)"], default_response_class=KafkaV2Response, responses=ERROR_RESPONSES)

_NAME = r"^[A-Za-z0-9._-]{1,249}$"
Group = Annotated[str, Path(pattern=_NAME)]
Instance = Annotated[str, Path(pattern=_NAME)]
Context = Annotated[GatewayContext, Depends(context)]
Principal = Annotated[str, Depends(principal)]
_BODY_TYPES = (METADATA_TYPE, "application/json")
SSE_KEEPALIVE_S = 15.0  # a comment line this often keeps proxies from closing a quiet stream
SSE_POLL_MS = 1000
INSTANCE_PATH = "/consumers/{group}/instances/{instance}"


async def _body(request: Request, ctx: GatewayContext, model: type[Any], *, optional: bool = False) -> Any:
    data = await read_bytes(request, ctx.settings.rest_request_max_bytes)
    if optional and not data.strip():
        return None
    check_metadata_content_type(request.headers.get("content-type"))
    return parse_model(data, model)


def _instance_uri(request: Request, group: str, name: str) -> str:
    return f"{str(request.base_url).rstrip('/')}/consumers/{group}/instances/{name}"


@router.post(
    "/consumers/{group}",
    summary="Create a consumer instance in a group",
    response_model=ConsumerCreated,
    openapi_extra=body_schema(CreateConsumer, *_BODY_TYPES),
)
async def create_consumer(group: Group, request: Request, ctx: Context, who: Principal) -> Response:
    try:
        body: CreateConsumer = await _body(request, ctx, CreateConsumer)
    except RestError as error:
        if error.error_code != UNPROCESSABLE:
            raise
        raise RestError(INVALID_CONSUMER_CONFIG, f"invalid consumer config: {error.message}") from None
    embedded = EmbeddedFormat(body.format)
    request_timeout_ms = body.consumer_request_timeout_ms
    if request_timeout_ms is None:
        request_timeout_ms = ctx.settings.consumer_request_timeout_ms
    name = body.name or f"rest-consumer-{uuid.uuid4()}"

    def make() -> ConsumerInstance:
        return ConsumerInstance(
            group,
            name,
            embedded,
            who,
            bootstrap=ctx.bootstrap,
            connections=ctx.connections,
            auto_offset_reset=body.auto_offset_reset,
            auto_commit=body.auto_commit_enable,
            isolation_level=body.isolation_level,
            fetch_min_bytes=body.fetch_min_bytes,
            request_timeout_ms=request_timeout_ms,
            instance_timeout_ms=ctx.settings.consumer_instance_timeout_ms,
        )

    await ctx.registry.add(group, name, who, make)
    return json_response({"instance_id": name, "base_uri": _instance_uri(request, group, name)})


@router.delete(INSTANCE_PATH, status_code=204, summary="Delete a consumer instance")
async def delete_consumer(group: Group, instance: Instance, ctx: Context, who: Principal) -> Response:
    ctx.registry.get(group, instance, who)
    await ctx.registry.remove(group, instance)
    return Response(status_code=204)


# ---- subscription and assignment -------------------------------------------------------------


@router.post(
    INSTANCE_PATH + "/subscription",
    status_code=204,
    summary="Subscribe to topics or a topic pattern",
    openapi_extra=body_schema(SubscriptionBody, *_BODY_TYPES),
)
async def subscribe(group: Group, instance: Instance, request: Request, ctx: Context, who: Principal) -> Response:
    consumer = ctx.registry.get(group, instance, who)
    body: SubscriptionBody = await _body(request, ctx, SubscriptionBody)
    if bool(body.topics) == bool(body.topic_pattern):
        raise RestError(422, "give either topics or topic_pattern")
    async with consumer.lock:
        consumer.subscribe(body.topics or [], body.topic_pattern)
    return Response(status_code=204)


@router.get(INSTANCE_PATH + "/subscription", summary="The subscribed topics", response_model=Subscription)
async def get_subscription(group: Group, instance: Instance, ctx: Context, who: Principal) -> Response:
    consumer = ctx.registry.get(group, instance, who)
    topics = consumer.topics
    if consumer.pattern is not None:
        topics = sorted({tp.topic for tp in consumer.assignment()})
    return json_response({"topics": topics})


@router.delete(INSTANCE_PATH + "/subscription", status_code=204, summary="Unsubscribe")
async def unsubscribe(group: Group, instance: Instance, ctx: Context, who: Principal) -> Response:
    consumer = ctx.registry.get(group, instance, who)
    async with consumer.lock:
        await consumer.unsubscribe()
    return Response(status_code=204)


def _partitions(body: PartitionsBody) -> list[TopicPartition]:
    return [TopicPartition(entry.topic, entry.partition) for entry in body.partitions]


@router.post(
    INSTANCE_PATH + "/assignments",
    status_code=204,
    summary="Assign partitions by hand",
    openapi_extra=body_schema(PartitionsBody, *_BODY_TYPES),
)
async def assign(group: Group, instance: Instance, request: Request, ctx: Context, who: Principal) -> Response:
    consumer = ctx.registry.get(group, instance, who)
    body: PartitionsBody = await _body(request, ctx, PartitionsBody)
    async with consumer.lock:
        await consumer.assign(_partitions(body))
    return Response(status_code=204)


@router.get(INSTANCE_PATH + "/assignments", summary="The assigned partitions", response_model=PartitionsBody)
async def get_assignment(group: Group, instance: Instance, ctx: Context, who: Principal) -> Response:
    consumer = ctx.registry.get(group, instance, who)
    partitions = [{"topic": tp.topic, "partition": tp.partition} for tp in sorted(consumer.assignment())]
    return json_response({"partitions": partitions})


# ---- records ---------------------------------------------------------------------------------


_RECORDS: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "Records, keys and values in the instance's format",
        "content": {embedded.content_type: {"schema": {"type": "array"}} for embedded in EmbeddedFormat},
    }
}


@router.get(
    INSTANCE_PATH + "/records",
    summary="Fetch records (long-polls up to the timeout)",
    response_class=Response,
    responses=_RECORDS,
)
async def records(
    *,
    group: Group,
    instance: Instance,
    request: Request,
    ctx: Context,
    who: Principal,
    timeout: Annotated[int | None, Query(ge=0, le=300_000, description="ms to wait for records")] = None,
    max_bytes: Annotated[int | None, Query(ge=1)] = None,
) -> Response:
    consumer = ctx.registry.get(group, instance, who)
    accepted_format(request.headers.get("accept"), consumer.format)
    limit = min(max_bytes or ctx.settings.consumer_request_max_bytes, ctx.settings.consumer_request_max_bytes)
    async with consumer.lock:
        got = await consumer.records(consumer.request_timeout_ms if timeout is None else timeout, limit)
        body = consumer.render_json(got)
        consumer.touch()
    RECORDS_CONSUMED.inc(sum(map(len, got)))
    return Response(body, media_type=consumer.format.content_type)


@router.get(
    INSTANCE_PATH + "/records/stream",
    summary="Records as Server-Sent Events, one event per record, until the client goes",
    response_class=Response,
    responses={200: {"description": "An event stream", "content": {"text/event-stream": {}}}},
)
async def stream_records(group: Group, instance: Instance, request: Request, ctx: Context, who: Principal) -> Response:
    consumer = ctx.registry.get(group, instance, who)
    if consumer.mode is Mode.NONE:
        await consumer.records(0, 1)  # raises: neither subscribed nor assigned

    async def events() -> AsyncIterator[bytes]:
        yield b": connected\n\n"
        quiet_since = time.monotonic()
        while (group, instance) in ctx.registry.local:  # StreamingResponse stops this when the client goes
            try:
                # Short polls: between them other requests to the instance (a commit) get the lock.
                async with consumer.lock:
                    got = await consumer.records(SSE_POLL_MS, ctx.settings.consumer_request_max_bytes)
                    rendered = consumer.render(got)
                    consumer.touch()
            except RestError as error:  # the stream ends with the error, as an event
                yield b"event: error\ndata: %s\n\n" % orjson.dumps(error.body())
                return
            if not rendered:
                if time.monotonic() - quiet_since >= SSE_KEEPALIVE_S:
                    quiet_since = time.monotonic()
                    yield b": keepalive\n\n"
                continue
            quiet_since = time.monotonic()
            RECORDS_CONSUMED.inc(len(rendered))
            yield b"".join(
                b"id: %s/%d/%d\nevent: record\ndata: %s\n\n"
                % (record["topic"].encode(), record["partition"], record["offset"], orjson.dumps(record))
                for record in rendered
            )
            await asyncio.sleep(0)

    return StreamingResponse(events(), media_type="text/event-stream", headers={"cache-control": "no-store"})


# ---- offsets and positions -------------------------------------------------------------------


@router.post(
    INSTANCE_PATH + "/offsets",
    status_code=200,
    response_model=None,
    responses={200: {"description": "Committed (no body)"}},
    summary="Commit offsets (each the last record processed); an empty body commits everything fetched",
    openapi_extra=body_schema(OffsetsBody, *_BODY_TYPES, required=False),
)
async def commit(group: Group, instance: Instance, request: Request, ctx: Context, who: Principal) -> Response:
    consumer = ctx.registry.get(group, instance, who)
    body: OffsetsBody | None = await _body(request, ctx, OffsetsBody, optional=True)
    offsets = (
        None if body is None else {TopicPartition(entry.topic, entry.partition): entry.offset for entry in body.offsets}
    )
    async with consumer.lock:
        await consumer.commit(offsets)
    return Response(status_code=200)


@router.get(
    INSTANCE_PATH + "/offsets", summary="Committed offsets of the given partitions", response_model=CommittedOffsets
)
async def committed(group: Group, instance: Instance, request: Request, ctx: Context, who: Principal) -> Response:
    consumer = ctx.registry.get(group, instance, who)
    body: PartitionsBody | None = await _body(request, ctx, PartitionsBody, optional=True)
    partitions = sorted(consumer.assignment()) if body is None else _partitions(body)
    async with consumer.lock:
        found = await consumer.committed(partitions)
    return json_response(
        {
            "offsets": [
                {
                    "topic": tp.topic,
                    "partition": tp.partition,
                    "offset": -1 if offset is None else offset,
                    "metadata": "",
                }
                for tp, offset in sorted(found.items())
            ]
        }
    )


@router.post(
    INSTANCE_PATH + "/positions",
    status_code=204,
    summary="Seek: the next record fetched from each partition is at the given offset",
    openapi_extra=body_schema(OffsetsBody, *_BODY_TYPES),
)
async def seek(group: Group, instance: Instance, request: Request, ctx: Context, who: Principal) -> Response:
    consumer = ctx.registry.get(group, instance, who)
    body: OffsetsBody = await _body(request, ctx, OffsetsBody)
    async with consumer.lock:
        for entry in body.offsets:
            consumer.seek(TopicPartition(entry.topic, entry.partition), entry.offset)
    return Response(status_code=204)


async def _seek_to(
    group: str, instance: str, request: Request, ctx: GatewayContext, who: str, *, end: bool
) -> Response:
    consumer = ctx.registry.get(group, instance, who)
    body: PartitionsBody = await _body(request, ctx, PartitionsBody)
    async with consumer.lock:
        await consumer.seek_to(_partitions(body), end=end)
    return Response(status_code=204)


@router.post(
    INSTANCE_PATH + "/positions/beginning",
    status_code=204,
    summary="Seek to the first offset of each partition",
    openapi_extra=body_schema(PartitionsBody, *_BODY_TYPES),
)
async def seek_to_beginning(
    group: Group, instance: Instance, request: Request, ctx: Context, who: Principal
) -> Response:
    return await _seek_to(group, instance, request, ctx, who, end=False)


@router.post(
    INSTANCE_PATH + "/positions/end",
    status_code=204,
    summary="Seek to the end of each partition",
    openapi_extra=body_schema(PartitionsBody, *_BODY_TYPES),
)
async def seek_to_end(group: Group, instance: Instance, request: Request, ctx: Context, who: Principal) -> Response:
    return await _seek_to(group, instance, request, ctx, who, end=True)
