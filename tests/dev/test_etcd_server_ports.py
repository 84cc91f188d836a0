"""Ports for local processes come from below the kernel's ephemeral range, never twice."""

from __future__ import annotations

import socket

from tidelog.dev.etcd_server import _ephemeral_range, free_port


def test_ports_are_free_outside_the_ephemeral_range_and_never_repeated() -> None:
    low, high = _ephemeral_range()
    ports = [free_port() for _ in range(100)]
    assert len(set(ports)) == len(ports)
    assert all(port < low or port > high for port in ports)
    with socket.socket() as listener:  # each is free: a listener can take it
        listener.bind(("127.0.0.1", ports[-1]))
