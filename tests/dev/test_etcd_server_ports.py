"""Ports for local processes come from below the kernel's ephemeral range, never twice."""

from __future__ import annotations

import socket

import pytest

from tidelog.dev.etcd_server import _ephemeral_range, free_port, port_range


def test_ports_are_free_outside_the_ephemeral_range_and_never_repeated(monkeypatch: pytest.MonkeyPatch) -> None:
    low, high = _ephemeral_range()
    monkeypatch.delenv("TIDELOG_DEV_PORTS", raising=False)  # a parallel run's worker has its own range
    ports = [free_port() for _ in range(100)]
    assert len(set(ports)) == len(ports)
    assert all(port < low or port > high for port in ports)
    with socket.socket() as listener:  # each is free: a listener can take it
        listener.bind(("127.0.0.1", ports[-1]))


def test_a_range_of_its_own_is_kept_and_a_bad_one_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """TIDELOG_DEV_PORTS: where each worker of a parallel suite picks its clusters' ports."""
    monkeypatch.setenv("TIDELOG_DEV_PORTS", "20000-20049")
    ports = [free_port() for _ in range(20)]
    assert all(20000 <= port <= 20049 for port in ports) and len(set(ports)) == 20
    for bad in ("20000", "high-low", "80-90", "30000-20000"):
        monkeypatch.setenv("TIDELOG_DEV_PORTS", bad)
        with pytest.raises(ValueError, match="TIDELOG_DEV_PORTS"):
            port_range()
