"""Response helpers: JSON bodies serialised by orjson with REST Proxy's content types."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.responses import Response

from tidelog.gateway.embedded_format import METADATA_TYPE
from tidelog.gateway.rest_errors import RestError

__all__ = ["error_response", "json_response"]


def json_response(content: Any, *, status: int = 200, media_type: str = METADATA_TYPE) -> Response:
    return Response(orjson.dumps(content), status_code=status, media_type=media_type)


def error_response(error: RestError) -> Response:
    return json_response(error.body(), status=error.status)
