"""/metrics over HTTP: prometheus_client's registry, then the per-partition families written as
text directly.

prometheus_client formats each sample in Python (label escaping, sorting, float formatting): about
3 µs a sample, so a broker holding 1,000 partitions spent 10 ms of a 15 ms scrape formatting its
3,000 per-partition samples. Those families are the only large ones, and their label values need
no escaping (topic names are [a-zA-Z0-9._-] and partitions are numbers), so their owners write them
here as text, one f-string a sample. Everything else goes through the registry as before. A family
is written by one or the other, never both.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Final

from prometheus_client import REGISTRY, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from tidelog.common.metrics_catalog import Kind, by_name

__all__ = ["add_text_source", "exposition", "family_text", "serve"]

# Each returns exposition text (whole families, HELP and TYPE lines included).
_TEXT_SOURCES: Final[list[Callable[[], str]]] = []


def add_text_source(source: Callable[[], str]) -> None:
    _TEXT_SOURCES.append(source)


def family_text(name: str, samples: Iterable[tuple[str, int | float]]) -> str:
    """A catalogued gauge family as text: `samples` are (label text, value), the label text
    already in `{a="x",b="y"}` form (or "" for none)."""
    metric = by_name(name)
    assert metric.kind is Kind.GAUGE, name
    head = f"# HELP {name} {metric.help}\n# TYPE {name} gauge\n"
    return head + "".join([f"{name}{labels} {value}\n" for labels, value in samples])


def exposition() -> bytes:
    text = generate_latest(REGISTRY)
    if not _TEXT_SOURCES:
        return text
    return text + "".join(source() for source in _TEXT_SOURCES).encode()


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        try:
            body = exposition()
        except Exception as error:  # a collector failed: say so rather than drop the connection
            self.send_error(500, f"metrics collection failed: {error}")
            return
        self.send_response(200)
        self.send_header("Content-Type", CONTENT_TYPE_LATEST)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass  # a scrape every few seconds is not worth a log line


def serve(port: int, host: str = "127.0.0.1") -> ThreadingHTTPServer:
    """Serve /metrics (any path, as prometheus_client's server does) on a daemon thread."""
    server = ThreadingHTTPServer((host, port), _Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="metrics-http", daemon=True).start()
    return server
