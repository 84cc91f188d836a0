"""Embedded formats: how keys and values travel inside REST Proxy's JSON bodies.

`binary`: base64 strings, any bytes. `json`: any JSON document, stored as its compact UTF-8 text.
The format is named by the content type (`application/vnd.kafka.binary.v2+json`,
`application/vnd.kafka.json.v2+json`; plain `application/json` means json) for produce, and by the
consumer instance for consume, where the Accept header must agree (40601 otherwise).
"""

from __future__ import annotations

import base64
import binascii
import enum
import json
import math
from typing import Any, Final

import orjson

from tidelog.gateway.rest_errors import FORMAT_MISMATCH, INVALID_PAYLOAD, UNSUPPORTED_MEDIA_TYPE, RestError

__all__ = [
    "METADATA_TYPE",
    "EmbeddedFormat",
    "accepted_format",
    "base64_bytes",
    "check_metadata_content_type",
    "plain_json_bytes",
    "produce_format",
]

METADATA_TYPE: Final = "application/vnd.kafka.v2+json"
_PLAIN_JSON: Final = ("application/json", METADATA_TYPE)


class EmbeddedFormat(enum.Enum):
    BINARY = "binary"
    JSON = "json"

    @property
    def content_type(self) -> str:
        return f"application/vnd.kafka.{self.value}.v2+json"

    def encode(self, data: Any, what: str) -> bytes | None:
        """A key or value as given in a request → the bytes stored (None stays None)."""
        if data is None:
            return None
        if self is EmbeddedFormat.JSON:
            return _json_bytes(data, what)
        try:
            return base64_bytes(data, what)
        except ValueError as error:
            raise RestError(INVALID_PAYLOAD, str(error)) from None

    def decode(self, data: bytes | None) -> Any:
        """Stored bytes → what a consumer of this format is given."""
        if data is None:
            return None
        if self is EmbeddedFormat.JSON:
            return orjson.loads(data)
        return binascii.b2a_base64(data, newline=False).decode()


def _json_bytes(data: Any, what: str) -> bytes:
    """A JSON key or value as stored: orjson's bytes, exactly what the client sent. orjson refuses
    integers beyond 64 bits (the standard library keeps them exactly) and writes a number beyond a
    double's range, parsed as infinity, as null: that is refused rather than stored changed."""
    encoded = plain_json_bytes(data)
    if encoded is not None:
        return encoded
    try:
        return json.dumps(data, separators=(",", ":"), allow_nan=False).encode()
    except (TypeError, ValueError) as error:
        if isinstance(error, ValueError) and _has_non_finite(data):
            raise RestError(INVALID_PAYLOAD, f"{what} holds a number beyond the range of a double") from None
        raise RestError(INVALID_PAYLOAD, f"{what} cannot be stored as JSON: {error}") from None


def plain_json_bytes(data: Any) -> bytes | None:
    """orjson's bytes for `data`, or None where orjson cannot be trusted with it (an integer beyond
    64 bits, which it refuses; a non-finite number, which it writes as null): `_json_bytes` then
    decides, and the produce fast path leaves the record to the model path."""
    if type(data) is str and data.isprintable() and '"' not in data and "\\" not in data:
        # What orjson writes for such a string, without its call (about 1 µs per fresh string
        # here, more than the rest of a record's decoding): nothing in it needs escaping.
        return ('"' + data + '"').encode()
    try:
        encoded = orjson.dumps(data)
    except TypeError:
        return None
    if b"null" in encoded and _has_non_finite(data):
        return None
    return encoded


def _has_non_finite(data: Any) -> bool:
    if isinstance(data, float):
        return not math.isfinite(data)
    if isinstance(data, dict):
        return any(_has_non_finite(value) for value in data.values())
    if isinstance(data, list):
        return any(_has_non_finite(value) for value in data)
    return False


def base64_bytes(data: object, what: str) -> bytes:
    """Strict base64 text → its bytes; ValueError naming `what` for anything else."""
    if not isinstance(data, str):
        raise ValueError(f"{what} must be base64 text")
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as error:
        raise ValueError(f"{what} is not valid base64: {error}") from None


def _media_type(header: str | None) -> str:
    return (header or "").split(";", 1)[0].strip().lower()


def produce_format(content_type: str | None) -> EmbeddedFormat:
    media = _media_type(content_type)
    for embedded in EmbeddedFormat:
        if media == embedded.content_type:
            return embedded
    if media == "application/json":
        return EmbeddedFormat.JSON
    raise RestError(
        UNSUPPORTED_MEDIA_TYPE,
        f"content type {media or '(none)'!r} is not supported: use "
        f"{EmbeddedFormat.BINARY.content_type}, {EmbeddedFormat.JSON.content_type} or application/json",
    )


def check_metadata_content_type(content_type: str | None) -> None:
    """Bodies of consumer and metadata requests are plain JSON (`application/vnd.kafka.v2+json`)."""
    media = _media_type(content_type)
    if media not in _PLAIN_JSON:
        raise RestError(
            UNSUPPORTED_MEDIA_TYPE, f"content type {media or '(none)'!r} is not supported: use {METADATA_TYPE}"
        )


def accepted_format(accept: str | None, instance_format: EmbeddedFormat) -> None:
    """A records request's Accept header must allow the instance's format (40601 otherwise)."""
    wanted = [_media_type(part) for part in (accept or "*/*").split(",")]
    allowed = {instance_format.content_type, "application/json", "*/*", "application/*", ""}
    if not any(media in allowed for media in wanted):
        raise RestError(
            FORMAT_MISMATCH,
            f"the consumer instance's format is {instance_format.value} ({instance_format.content_type}); "
            f"Accept asked for {accept!r}",
        )
