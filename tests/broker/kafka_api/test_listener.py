"""The Kafka listener's connection rules, on a listener of its own (no cluster behind it: these
requests never reach a service): ApiVersions answered, an idle connection closed after
connections.max.idle.ms, a connection beyond max.connections closed at once, a request of an
unknown API closing its connection."""

from __future__ import annotations

import asyncio
import struct

from tests.broker.kafka_api.listening import listening
from tidelog.common.kafka_wire.message_codec import codec

API_VERSIONS_V3 = b"\x00\x12\x00\x03\x00\x00\x00\x05\x00\x00\x00" + codec("ApiVersionsRequest", 3).encode(
    {"ClientSoftwareName": "test", "ClientSoftwareVersion": "1"}
)


async def _closed(reader: asyncio.StreamReader, within_s: float) -> bool:
    """Whether the broker closes the connection within the time (reading what it sent first)."""
    try:
        async with asyncio.timeout(within_s):
            while await reader.read(4096):
                pass
        return True
    except TimeoutError:
        return False


async def test_api_versions_is_answered_and_an_idle_connection_is_closed() -> None:
    async with listening(idle_ms=300) as port:
        await _answered_then_closed_when_idle(port)


async def _answered_then_closed_when_idle(port: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(struct.pack(">i", len(API_VERSIONS_V3)) + API_VERSIONS_V3)
    size = struct.unpack(">i", await reader.readexactly(4))[0]
    answer = await reader.readexactly(size)
    assert answer[:4] == b"\x00\x00\x00\x05"  # the correlation id, response header v0
    assert codec("ApiVersionsResponse", 3).decode(answer[4:])["ErrorCode"] == 0
    assert await _closed(reader, within_s=5.0)  # connections.max.idle.ms (300 ms here)
    writer.close()


async def test_a_connection_beyond_max_connections_is_closed_and_an_unknown_api_closes_its_own() -> None:
    async with listening(idle_ms=60_000) as port:  # (no connection here closes for being idle)
        await _limits(port)


async def _limits(port: int) -> None:
    held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(2)]
    await asyncio.sleep(0)  # (both accepted before the third: the order the server sees them)
    extra_reader, extra_writer = await asyncio.open_connection("127.0.0.1", port)
    assert await _closed(extra_reader, within_s=5.0)
    reader, writer = held[0]
    unknown = b"\x03\xe7\x00\x00\x00\x00\x00\x01\xff\xff"
    writer.write(struct.pack(">i", len(unknown)) + unknown)
    assert await _closed(reader, within_s=5.0)
    for _, held_writer in held:
        held_writer.close()
    extra_writer.close()
