"""The broker's server metrics that Strimzi's dashboards read: the connection count is sampled on
its own thread only after a scrape asked for it (reading /proc/net/tcp walks the kernel's whole
socket table)."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from tidelog.broker import server_metrics
from tidelog.broker.server_metrics import ConnectionCount


@pytest.fixture
def listening() -> Iterator[socket.socket]:
    server = socket.create_server(("127.0.0.1", 0))
    yield server
    server.close()


def _poll(condition: object, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def test_the_count_follows_connections_once_scraped(listening: socket.socket, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server_metrics, "CONNECTIONS_SAMPLE_S", 0.02)
    count = ConnectionCount(listening.getsockname()[1])
    assert count.count == 0
    clients = [socket.create_connection(listening.getsockname()) for _ in range(2)]
    try:
        _poll(lambda: count.count == 2)
    finally:
        for client in clients:
            client.close()


def test_nothing_is_counted_until_a_scrape_asks(listening: socket.socket, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server_metrics, "CONNECTIONS_SAMPLE_S", 0.02)
    port = listening.getsockname()[1]
    calls: list[int] = []  # the ports counted (another test's thread may still count its own)
    counted = server_metrics._established_to

    def counting(asked: int) -> int:
        calls.append(asked)
        return counted(asked)

    monkeypatch.setattr(server_metrics, "_established_to", counting)
    count = ConnectionCount(port)
    assert calls.count(port) == 1  # at the start
    time.sleep(0.2)  # ten sample intervals with no scrape: no count (an absence has no condition to wait on)
    assert calls.count(port) == 1
    assert count.count == 0  # the scrape reads the last count and asks for the next
    _poll(lambda: calls.count(port) == 2)
    time.sleep(0.2)
    assert calls.count(port) == 2
