"""The client library prints nothing unless the application configures logging; then its events
are JSON lines through the standard `logging` module."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

CLIENT = Path(__file__).resolve().parents[2] / "src" / "tidelog" / "client"

SCRIPT = """
import logging, sys
if sys.argv[1] == "configured":
    logging.basicConfig(level=logging.INFO, format="%(name)s %(message)s")
from tidelog.client import consumer, producer
# What the client says when a broker does not answer a fetch, or metadata cannot be refreshed.
consumer.log.info("fetch_failed", endpoint="127.0.0.1:9", code="UNAVAILABLE")
producer.log.warning("metadata_refresh_failed", error="no broker answered")
print("done")
"""


def _run(mode: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, timeout=60, check=False)


def test_an_application_that_configured_nothing_sees_nothing() -> None:
    quiet = _run("quiet")
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stdout == "done\n"
    assert quiet.stderr == ""


def test_an_application_that_configured_logging_gets_json_events() -> None:
    loud = _run("configured")
    assert loud.returncode == 0, loud.stderr
    assert loud.stdout == "done\n"
    lines = [line.partition(" ") for line in loud.stderr.splitlines()]
    assert [name for name, _, _ in lines] == ["tidelog.client.consumer", "tidelog.client.producer"], loud.stderr
    events = [json.loads(message) for _, _, message in lines]
    assert (events[0]["event"], events[0]["level"], events[0]["code"]) == ("fetch_failed", "info", "UNAVAILABLE")
    assert (events[1]["event"], events[1]["level"]) == ("metadata_refresh_failed", "warning")


def test_no_client_module_logs_through_structlogs_global_configuration() -> None:
    for module in CLIENT.glob("*.py"):
        assert "structlog.get_logger" not in module.read_text(), f"{module.name}: use client_logging.get_logger"
