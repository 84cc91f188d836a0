"""The broker's server metrics that Strimzi's dashboards read: the connection count is sampled on
its own thread only after a scrape asked for it (reading /proc/net/tcp walks the kernel's whole
socket table)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator

import pytest

from tests.cluster.conftest import wait_until
from tidelog.broker import server_metrics
from tidelog.broker.server_metrics import ConnectionCount

SAMPLE_S = 0.02  # CONNECTIONS_SAMPLE_S for these tests


@pytest.fixture
def listening(monkeypatch: pytest.MonkeyPatch) -> Iterator[socket.socket]:
    monkeypatch.setattr(server_metrics, "CONNECTIONS_SAMPLE_S", SAMPLE_S)
    server = socket.create_server(("127.0.0.1", 0))
    yield server
    server.close()


async def test_the_count_follows_connections_once_scraped(listening: socket.socket) -> None:
    count = ConnectionCount(listening.getsockname()[1])
    assert count.count == 0
    clients = [socket.create_connection(listening.getsockname()) for _ in range(2)]
    try:

        async def both_counted() -> bool:
            return count.count == 2

        await wait_until(both_counted, timeout_s=10, what="two connections counted")
    finally:
        for client in clients:
            client.close()


async def test_nothing_is_counted_until_a_scrape_asks(
    listening: socket.socket, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = listening.getsockname()[1]
    calls: list[int] = []  # the ports counted (another test's thread may still count its own)
    counted = server_metrics._established_to

    def counting(asked: int) -> int:
        calls.append(asked)
        return counted(asked)

    monkeypatch.setattr(server_metrics, "_established_to", counting)
    count = ConnectionCount(port)
    assert calls.count(port) == 1  # at the start
    await asyncio.sleep(10 * SAMPLE_S)  # no scrape for ten intervals: no count (an absence has no condition)
    assert calls.count(port) == 1
    assert count.count == 0  # the scrape reads the last count and asks for the next

    async def asked_once() -> bool:
        return calls.count(port) == 2

    await wait_until(asked_once, timeout_s=10, what="the count a scrape asked for")
    await asyncio.sleep(10 * SAMPLE_S)
    assert calls.count(port) == 2
