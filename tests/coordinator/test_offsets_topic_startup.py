"""A coordinator starting with the cluster waits for brokers that cannot answer Metadata yet
(UNAVAILABLE until a controller sent them the cluster's) instead of exiting at once."""

from __future__ import annotations

import socket
import time

import pytest

from tidelog.common.settings import SecuritySettings
from tidelog.coordinator.main import _ensure_offsets_topic


def _closed_port() -> int:
    with socket.socket() as probe:  # bound, then closed: nothing listens there
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


async def test_a_coordinator_keeps_asking_until_its_deadline_then_says_why() -> None:
    started = time.monotonic()
    with pytest.raises(ConnectionError, match="no broker answered a metadata request"):
        await _ensure_offsets_topic(
            [f"127.0.0.1:{_closed_port()}"], 1, 1, security=SecuritySettings.from_configs(), wait_s=1.0
        )
    assert time.monotonic() - started >= 1.0  # it retried until the deadline, not failed at the first refusal
