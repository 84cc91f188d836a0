"""A Kafka request frame (what follows the 4-byte size) parsed into its header and body, and a
response framed; pure functions, so the fuzzer drives exactly what the listener runs.

The request header is v2 (with tagged fields) for a flexible request version, v1 otherwise; its
client id is never a compact string. The response header is v1 for a flexible version, but
ApiVersions always answers with v0 so that a client that sent a version the broker does not know
can still read the answer (KIP-511).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any, Final, NamedTuple

from tidelog.common.kafka_wire.message_codec import codec
from tidelog.common.kafka_wire.primitives import INT32, MalformedFrameError, Reader

__all__ = [
    "API_VERSIONS_KEY",
    "HEADER_FIXED",
    "ParsedRequest",
    "UnsupportedVersionError",
    "frame_response",
    "parse_request",
]

HEADER_FIXED: Final = struct.Struct(">hhi")  # api key, api version, correlation id
SIZE: Final = struct.Struct(">i")
API_VERSIONS_KEY: Final = 18


class UnsupportedVersionError(MalformedFrameError):
    """A known API at a version not served: ApiVersions answers it, anything else closes."""

    def __init__(self, api_key: int, version: int, correlation_id: int, message: str) -> None:
        super().__init__(message)
        self.api_key, self.version, self.correlation_id = api_key, version, correlation_id


class ParsedRequest(NamedTuple):
    api_key: int
    version: int
    correlation_id: int
    client_id: str
    body: dict[str, Any]


def parse_request(frame: bytes | memoryview, served: Mapping[int, tuple[str, int, int]]) -> ParsedRequest:
    """Header and body of one request; `served` maps an API key to (message name, lowest and
    highest version). MalformedFrameError for anything that does not parse as that API says."""
    if len(frame) < HEADER_FIXED.size:
        raise MalformedFrameError(f"a request of {len(frame)} bytes has no header")
    api_key, version, correlation_id = HEADER_FIXED.unpack_from(frame)
    entry = served.get(api_key)
    if entry is None:
        raise MalformedFrameError(f"unknown API key {api_key}")
    name, low, high = entry
    if not low <= version <= high:
        raise UnsupportedVersionError(
            api_key, version, correlation_id, f"{name} v{version} is not served ({low}-{high})"
        )
    reader = Reader(frame, HEADER_FIXED.size)
    client_id = reader.string(compact=False, nullable=True)
    request_codec = codec(name + "Request", version)
    if request_codec.flexible:
        for _ in range(reader.uvarint()):  # the header's tagged fields: none is known
            reader.uvarint()
            reader.raw(reader.uvarint())
    # Bytes after the body are ignored, as Kafka's broker ignores them: librdkafka's flexible
    # Metadata request for every topic ends with three stray zero bytes (its four-byte array count
    # placeholder, of which only the first byte is the count).
    body = request_codec.read(reader)
    return ParsedRequest(api_key, version, correlation_id, client_id or "", body)


def frame_response(name: str, api_key: int, version: int, correlation_id: int, body: dict[str, Any]) -> bytes:
    """The whole response: size, header, body."""
    response_codec = codec(name + "Response", version)
    out = bytearray(4)
    out += INT32.pack(correlation_id)
    if response_codec.flexible and api_key != API_VERSIONS_KEY:
        out.append(0)  # no tagged fields in the response header
    response_codec.write(out, body)
    SIZE.pack_into(out, 0, len(out) - 4)
    return bytes(out)
