"""The death watch: a port that refuses connections, every time, belongs to no process; a process
that dies is found dead at once, even when its port outlives its connections by a moment."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import socket

import grpc
import pytest
from grpc_health.v1 import health, health_pb2_grpc

from tidelog.common.channels import ChannelPool
from tidelog.controller import process_watch
from tidelog.controller.process_watch import process_gone, refuses_connections


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


class _DyingProcess:
    """A gRPC health server behind a loopback TCP proxy, whose death is staged as a killed process's
    can be: its connections close first, its listening socket a moment later (a connect in that
    moment is accepted, and closed at once)."""

    def __init__(self) -> None:
        self.dying = False
        self.connections: list[asyncio.StreamWriter] = []
        self.watched = asyncio.Event()

    async def start(self) -> str:
        self.server = grpc.aio.server()
        health_pb2_grpc.add_HealthServicer_to_server(health.aio.HealthServicer(), self.server)
        backend = self.server.add_insecure_port("127.0.0.1:0")
        await self.server.start()
        self.listener = await asyncio.start_server(functools.partial(self._forward, backend), "127.0.0.1", 0)
        return f"127.0.0.1:{self.listener.sockets[0].getsockname()[1]}"

    async def _forward(self, backend: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.dying:
            writer.close()
            return
        self.connections.append(writer)
        upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", backend)
        self.connections.append(upstream_writer)
        self.watched.set()

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError):
                while data := await source.read(65536):
                    sink.write(data)
                    await sink.drain()
            sink.close()

        await asyncio.gather(pipe(reader, upstream_writer), pipe(upstream_reader, writer))

    async def die(self, listener_lingers_s: float) -> None:
        self.dying = True
        for connection in self.connections:
            connection.close()
        await asyncio.sleep(listener_lingers_s)  # (the staging itself: the gap being tested)
        self.listener.close()
        await self.server.stop(None)


async def test_a_process_whose_port_outlives_its_connections_by_a_moment_is_found_dead_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # With one wait of REWATCH_S after the accepted connect, this took REWATCH_S (set to 60 s here).
    monkeypatch.setattr(process_watch, "REWATCH_S", 60.0)
    process = _DyingProcess()
    endpoint = await process.start()
    channels = ChannelPool()
    try:
        watch = asyncio.create_task(process_gone(channels, endpoint))
        await asyncio.wait_for(process.watched.wait(), 10)
        await process.die(listener_lingers_s=0.1)
        await asyncio.wait_for(watch, 10)
    finally:
        await channels.close()
