"""v3-style produce: `POST /v3/clusters/{cluster_id}/topics/{topic}/records`.

The body is one record, or — streaming produce — any number of JSON records one after another
(a chunked request body). Each record is sent as soon as it is parsed, and the answer streams one
delivery report per record, in order, as JSON objects separated by newlines; records keep arriving
while earlier ones are acknowledged. A record that is malformed gets an error report and ends the
stream; the ones before it were produced and said so.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import datetime
import json
import re
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Annotated, Any, Final

import orjson
from fastapi import APIRouter, Depends, Path, Request
from starlette.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send

from tidelog.client import RecordDelivery
from tidelog.common.errors import TidelogError
from tidelog.gateway.embedded_format import base64_bytes
from tidelog.gateway.gateway_context import GatewayContext, context
from tidelog.gateway.gateway_metrics import RECORDS_PRODUCED
from tidelog.gateway.request_body import body_schema
from tidelog.gateway.responses import ERROR_RESPONSES, json_response
from tidelog.gateway.rest_errors import (
    CLUSTER_NOT_FOUND,
    PARTITION_NOT_FOUND,
    REQUEST_TOO_LARGE,
    RestError,
    from_tidelog,
)
from tidelog.gateway.rest_models import Cluster, ClusterList, RecordReport, V3Record
from tidelog.gateway.topic_routes import TopicName

__all__ = ["router"]

router = APIRouter(prefix="/v3", tags=["v3"], responses=ERROR_RESPONSES, default_response_class=JSONResponse)
Context = Annotated[GatewayContext, Depends(context)]
ClusterId = Annotated[str, Path(max_length=64)]
IN_FLIGHT_MAX: Final = 1000  # records sent and not yet reported, per stream: bounds a fast writer
_DECODER: Final = json.JSONDecoder()
_WHITESPACE: Final = re.compile(r"[ \t\r\n]*")


def _cluster(ctx: GatewayContext, cluster_id: str) -> dict[str, Any]:
    if cluster_id != ctx.cluster_id:
        raise RestError(CLUSTER_NOT_FOUND, f"cluster {cluster_id!r} not found; this is {ctx.cluster_id!r}")
    return {"kind": "KafkaCluster", "cluster_id": ctx.cluster_id}


@router.get("/clusters", summary="The cluster (there is one)", response_model=ClusterList)
async def list_clusters(ctx: Context) -> Response:
    return json_response(
        {"kind": "KafkaClusterList", "data": [_cluster(ctx, ctx.cluster_id)]}, media_type="application/json"
    )


@router.get("/clusters/{cluster_id}", summary="The cluster", response_model=Cluster)
async def get_cluster(cluster_id: ClusterId, ctx: Context) -> Response:
    return json_response(_cluster(ctx, cluster_id), media_type="application/json")


def _data(part: Any, what: str) -> tuple[bytes | None, dict[str, Any] | None]:
    """A v3 key or value {"type": BINARY|JSON|STRING, "data": ...} → bytes, and its report."""
    if part is None:
        return None, None
    if not isinstance(part, dict) or "data" not in part:
        raise ValueError(f"{what} must be an object with 'type' and 'data'")
    kind = str(part.get("type", "JSON")).upper()
    data = part["data"]
    if data is None:
        return None, {"type": kind, "size": 0}
    if kind == "BINARY":
        encoded = base64_bytes(data, f"{what}.data")
    elif kind == "STRING":
        if not isinstance(data, str):
            raise ValueError(f"{what}.data must be a string for type STRING")
        encoded = data.encode()
    elif kind == "JSON":
        encoded = orjson.dumps(data)
    else:
        raise ValueError(f"{what}.type {kind!r} is not supported: BINARY, JSON or STRING")
    return encoded, {"type": kind, "size": len(encoded)}


def _timestamp(raw: Any) -> int | None:
    if raw is None:
        return None
    if isinstance(raw, int) and not isinstance(raw, bool):
        return raw
    if isinstance(raw, str):
        parsed = datetime.datetime.fromisoformat(raw.replace("Z", "+00:00"))
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=datetime.UTC)
        return int(parsed.timestamp() * 1000)
    raise ValueError("timestamp must be an ISO 8601 date-time or milliseconds since the epoch")


def _iso(milliseconds: int) -> str:
    moment = datetime.datetime.fromtimestamp(milliseconds / 1000, datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


async def _documents(request: Request, limit: int) -> AsyncIterator[Any]:
    """JSON documents as each completes in the body; ValueError for a malformed one."""
    utf8 = codecs.getincrementaldecoder("utf-8")()
    text, position = "", 0
    try:
        async for chunk in request.stream():
            text, position = text[position:] + utf8.decode(chunk), 0
            while True:
                position = _WHITESPACE.match(text, position).end()  # type: ignore[union-attr]
                if position == len(text):
                    break
                try:
                    document, position = _DECODER.raw_decode(text, position)
                except json.JSONDecodeError as error:
                    # At the end of what has come so far (a literal such as `false` may be cut):
                    # incomplete, not malformed — wait for the rest of the body.
                    if error.pos >= len(text) - 5 or error.msg.startswith("Unterminated"):
                        if len(text) - position > limit:
                            raise RestError(
                                REQUEST_TOO_LARGE, f"a record exceeds rest.request.max.bytes={limit}"
                            ) from None
                        break
                    raise ValueError(f"malformed JSON: {error.msg}") from None
                yield document
        utf8.decode(b"", final=True)
    except UnicodeDecodeError as error:
        raise ValueError(f"request body is not UTF-8: {error}") from None
    if text[position:].strip():
        raise ValueError("malformed JSON at the end of the body")


@router.post(
    "/clusters/{cluster_id}/topics/{topic}/records",
    summary="Produce records (one, or a stream of them): one delivery report per record, newline-separated",
    response_model=RecordReport,
    openapi_extra=body_schema(V3Record, "application/json"),
)
async def produce_records(cluster_id: ClusterId, topic: TopicName, request: Request, ctx: Context) -> Response:
    _cluster(ctx, cluster_id)
    try:
        count = len(await ctx.producer.metadata.partitions_of(topic))
    except TidelogError as error:
        raise from_tidelog(error) from None
    reports: asyncio.Queue[Any] = asyncio.Queue(maxsize=IN_FLIGHT_MAX)

    async def send_all() -> None:
        try:
            async for document in _documents(request, ctx.settings.rest_request_max_bytes):
                try:
                    await reports.put(await _send(ctx, topic, count, document))
                except ValueError as error:
                    await reports.put({"error_code": 400, "message": str(error)})
                except RestError as error:
                    await reports.put(error.body())
        except ValueError as error:
            await reports.put({"error_code": 400, "message": str(error)})
        except RestError as error:
            await reports.put(error.body())
        finally:
            await reports.put(None)

    return _ReportStream(send_all, reports, cluster_id, topic)


class _ReportStream(Response):
    """Streams the delivery reports while the request body is still being read.

    Starlette's StreamingResponse reads the request's `receive` channel to notice a disconnect,
    which would swallow the body this route is still parsing; this response never reads it (a
    client that goes away fails the next send instead).
    """

    def __init__(
        self,
        send_all: Callable[[], Coroutine[Any, Any, None]],
        reports: asyncio.Queue[Any],
        cluster_id: str,
        topic: str,
    ) -> None:
        super().__init__(media_type="application/json")
        self.raw_headers = [(b"content-type", b"application/json")]  # streamed: no content-length
        self.send_all = send_all
        self.reports = reports
        self.cluster_id = cluster_id
        self.topic = topic

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        sender = asyncio.create_task(self.send_all())
        try:
            await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
            while (report := await self.reports.get()) is not None:
                if isinstance(report, tuple):
                    report = await _delivered(self.cluster_id, self.topic, *report)
                await send({"type": "http.response.body", "body": orjson.dumps(report) + b"\n", "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            sender.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sender


async def _send(ctx: GatewayContext, topic: str, count: int, document: Any) -> tuple[RecordDelivery, Any, Any]:
    if not isinstance(document, dict):
        raise ValueError("a record must be a JSON object")
    partition = document.get("partition_id")
    if partition is not None and (not isinstance(partition, int) or not 0 <= partition < count):
        raise RestError(PARTITION_NOT_FOUND, f"topic {topic!r} has no partition {partition!r}")
    key, key_report = _data(document.get("key"), "key")
    value, value_report = _data(document.get("value"), "value")
    headers = []
    for header in document.get("headers") or []:
        if not isinstance(header, dict) or not isinstance(header.get("name"), str):
            raise ValueError("each header must be an object with a 'name'")
        raw = header.get("value")
        headers.append((header["name"], None if raw is None else base64_bytes(raw, f"header {header['name']!r}")))
    try:
        delivery = await ctx.producer.send(
            topic,
            value,
            key=key,
            partition=partition,
            headers=tuple(headers) or None,
            timestamp=_timestamp(document.get("timestamp")),
        )
    except TidelogError as error:
        raise RestError(400, str(error)) from None
    return delivery, key_report, value_report


async def _delivered(cluster_id: str, topic: str, delivery: RecordDelivery, key: Any, value: Any) -> dict[str, Any]:
    try:
        metadata = await delivery
    except TidelogError as error:
        return from_tidelog(error).body()
    RECORDS_PRODUCED.inc()
    return {
        "error_code": 200,
        "cluster_id": cluster_id,
        "topic_name": topic,
        "partition_id": metadata.partition,
        "offset": metadata.offset,
        "timestamp": _iso(metadata.timestamp),
        "key": key,
        "value": value,
    }
