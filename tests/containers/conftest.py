"""Tests against real containers (testcontainers): the etcd release the Helm chart deploys, and a
k3s API server checking the chart's manifests. They need a Docker engine and skip, saying why,
where there is none (CI machines and this project's dev machines have only the Docker client)."""

from __future__ import annotations

import os
import socket
from urllib.parse import urlparse

import pytest


def _engine_answers() -> str | None:
    """None when a Docker engine answers /_ping, else why not. A raw socket, closed in every case
    (docker-py's client leaks its socket when the engine is missing)."""
    where = urlparse(os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock"))
    try:
        if where.scheme == "unix":
            connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            address: str | tuple[str, int] = where.path
        else:
            connection = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            address = (where.hostname or "localhost", where.port or 2375)
        with connection:
            connection.settimeout(5)
            connection.connect(address)
            connection.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
            answer = connection.recv(64)
    except OSError as error:
        return f"{where.geturl()}: {error.strerror or error}"
    return None if b" 200 " in answer else f"{where.geturl()} answered {answer[:40]!r}"


@pytest.fixture(scope="session")
def docker_engine() -> None:
    reason = _engine_answers()
    if reason is not None:
        pytest.skip(f"no Docker engine: {reason}")
