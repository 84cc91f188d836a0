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

import dataclasses
import hmac
import ssl
import threading
from collections.abc import Callable, Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar, Final

from prometheus_client import REGISTRY, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from tidelog.server_common.metrics_catalog import Kind, by_name

__all__ = ["MetricsProtection", "add_text_source", "exposition", "family_text", "serve"]

HANDSHAKE_TIMEOUT_S: Final = 10.0  # a scraper's TLS handshake and request, at most
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


@dataclasses.dataclass(frozen=True)
class MetricsProtection:
    """What /metrics asks of a scraper (metrics.* settings): HTTPS, a client certificate, a token.
    Metrics name every topic and consumer group, including those a caller may not describe."""

    certificate_file: str = ""
    key_file: str = ""
    client_ca_file: str = ""
    bearer_token_file: str = ""

    def ssl_context(self) -> ssl.SSLContext | None:
        if not self.certificate_file:
            assert not self.client_ca_file, "a client certificate needs HTTPS (metrics.ssl.certificate.location)"
            return None
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.certificate_file, self.key_file or None)
        if self.client_ca_file:
            context.load_verify_locations(self.client_ca_file)
            context.verify_mode = ssl.CERT_REQUIRED
        return context

    def token(self) -> bytes | None:
        if not self.bearer_token_file:
            return None
        token = Path(self.bearer_token_file).read_bytes().strip()
        assert token, f"{self.bearer_token_file} is empty"
        return token


class _Handler(BaseHTTPRequestHandler):
    token: ClassVar[bytes | None] = None  # set per server (a subclass each)

    def do_GET(self) -> None:
        if self.token is not None:
            given = self.headers.get("Authorization", "").encode()
            if not hmac.compare_digest(given, b"Bearer " + self.token):
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Bearer realm="metrics"')
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
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


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    context: ssl.SSLContext | None = None

    def finish_request(self, request: Any, client_address: Any) -> None:
        if self.context is not None:  # the TLS handshake in the request's own thread, bounded
            request.settimeout(HANDSHAKE_TIMEOUT_S)
            request = self.context.wrap_socket(request, server_side=True)
        super().finish_request(request, client_address)

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a scraper that failed its handshake or hung up: nothing to say on stderr


def serve(port: int, host: str = "127.0.0.1", protection: MetricsProtection | None = None) -> ThreadingHTTPServer:
    """Serve /metrics (any path, as prometheus_client's server does) on a daemon thread, protected
    as `protection` says."""
    protection = protection or MetricsProtection()
    handler = type("_ProtectedHandler", (_Handler,), {"token": protection.token()})
    server = _Server((host, port), handler)
    server.context = protection.ssl_context()
    threading.Thread(target=server.serve_forever, name="metrics-http", daemon=True).start()
    return server
