"""The death watch's last word: a port that refuses connections, every time, belongs to no process."""

from __future__ import annotations

import asyncio
import socket

from tidelog.controller.process_watch import refuses_connections


async def test_a_listening_port_is_alive_and_a_closed_one_dead() -> None:
    server = await asyncio.start_server(lambda reader, writer: writer.close(), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        assert not await refuses_connections(f"127.0.0.1:{port}")
    finally:
        server.close()
        await server.wait_closed()
    assert await refuses_connections(f"127.0.0.1:{port}")


async def test_an_unreachable_host_is_not_taken_for_dead() -> None:
    # 192.0.2.0/24 (TEST-NET-1) routes nowhere: the connect fails or times out, it is not refused.
    with socket.socket() as probe:
        probe.settimeout(0.2)
        try:
            probe.connect(("192.0.2.1", 9))
        except ConnectionRefusedError:  # some sandbox answers with a reset: nothing to learn here
            return
        except OSError:
            pass
    assert not await refuses_connections("192.0.2.1:9")
