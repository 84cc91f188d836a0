"""Reading a request body: bounded by `rest.request.max.bytes` (413 beyond it, before anything is
acted on), parsed and validated in one pass by pydantic-core from the bytes, with REST Proxy's
answers for what is wrong (400 malformed JSON, 422 a well-formed body that breaks the schema)."""

from __future__ import annotations

from typing import Any, TypeVar

from fastapi import Request
from pydantic import BaseModel, TypeAdapter, ValidationError

from tidelog.gateway.rest_errors import BAD_REQUEST, REQUEST_TOO_LARGE, UNPROCESSABLE, RestError

__all__ = ["body_schema", "read_bytes", "read_model"]

Model = TypeVar("Model", bound=BaseModel)
_ADAPTERS: dict[type[Any], TypeAdapter[Any]] = {}


async def read_bytes(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise RestError(REQUEST_TOO_LARGE, f"request body of {declared} bytes exceeds rest.request.max.bytes={limit}")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise RestError(REQUEST_TOO_LARGE, f"request body exceeds rest.request.max.bytes={limit}")
        chunks.append(chunk)
    return b"".join(chunks)


def parse_model(data: bytes, model: type[Model]) -> Model:
    adapter = _ADAPTERS.get(model)
    if adapter is None:
        adapter = _ADAPTERS[model] = TypeAdapter(model)
    try:
        parsed: Model = adapter.validate_json(data)
    except ValidationError as error:
        problems = error.errors(include_url=False, include_input=False)
        if any(problem["type"] == "json_invalid" for problem in problems):
            raise RestError(BAD_REQUEST, f"malformed JSON: {problems[0]['msg']}") from None
        where = "; ".join(
            f"{'.'.join(str(part) for part in problem['loc']) or 'body'}: {problem['msg']}" for problem in problems[:5]
        )
        raise RestError(UNPROCESSABLE, f"invalid request body: {where}") from None
    return parsed


async def read_model(request: Request, model: type[Model], limit: int) -> Model:
    return parse_model(await read_bytes(request, limit), model)


def body_schema(
    model: type[BaseModel],
    *content_types: str,
    required: bool = True,
    by_type: dict[str, type[BaseModel]] | None = None,
) -> dict[str, Any]:
    """`openapi_extra` for a route that reads its body itself: the schema under each content type
    (`by_type` gives another model for some of them)."""
    models = {content_type: model for content_type in content_types} | (by_type or {})
    content: dict[str, Any] = {}
    definitions: dict[str, Any] = {}
    for content_type, each in models.items():
        schema = each.model_json_schema(ref_template="#/components/schemas/{model}")
        definitions.update(schema.pop("$defs", {}))
        content[content_type] = {"schema": schema}
    return {"requestBody": {"required": required, "content": content}, "x-tidelog-schemas": definitions}
