"""Response helpers: JSON bodies serialised by orjson with REST Proxy's content types."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.responses import JSONResponse, Response

from tidelog.gateway.embedded_format import METADATA_TYPE
from tidelog.gateway.rest_errors import RestError

__all__ = ["ERROR_RESPONSES", "KafkaV2Response", "error_response", "json_response"]


class KafkaV2Response(JSONResponse):
    """Documents REST Proxy's metadata content type for a route's answers."""

    media_type = METADATA_TYPE


# Every error a route may answer, documented for the OpenAPI document (what schemathesis checks).
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {
        "description": description,
        "content": {METADATA_TYPE: {"schema": {"$ref": "#/components/schemas/RestErrorBody"}}},
    }
    for status, description in {
        400: "Malformed JSON",
        401: "Authentication required (40101)",
        403: "The principal may not do this: its ACLs refuse it (40301)",
        404: "Topic (40401), partition (40402), consumer instance (40403) or cluster (40406) not found",
        406: "The Accept header does not allow the consumer's format (40601)",
        409: "Conflict: instance exists (40902), illegal state (40903)",
        413: "Request body larger than rest.request.max.bytes",
        415: "Unsupported content type",
        422: "Invalid request or consumer config (42204), invalid payload (42206)",
        429: "consumer.instances.max reached (42901)",
        500: "Platform error (50002), retriable platform error (50003)",
    }.items()
}


def json_response(content: Any, *, status: int = 200, media_type: str = METADATA_TYPE) -> Response:
    return Response(orjson.dumps(content), status_code=status, media_type=media_type)


def error_response(error: RestError) -> Response:
    return json_response(error.body(), status=error.status)
