"""HTTPS for the REST listener (`rest.ssl.*`): uvicorn's TLS options, the certificate re-read
into the listening context when its files change (a rotated Secret applies to new connections),
and the context gateways forward to each other with."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Callable
from typing import Any, Final

import structlog

from tidelog.common.errors import InvalidConfigError
from tidelog.common.security.tls.pem_files import PemFiles
from tidelog.common.settings import GatewaySettings

__all__ = ["RestTls"]

log = structlog.get_logger(__name__)

RELOAD_CHECK_S: Final = 1.0
_CERT_REQS: Final = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


class RestTls:
    def __init__(self, settings: GatewaySettings) -> None:
        self.settings = settings
        self.files = PemFiles(
            settings.rest_ssl_certificate_location, settings.rest_ssl_key_location, settings.rest_ssl_ca_location
        )
        if settings.rest_ssl_client_auth != "none" and not settings.rest_ssl_ca_location:
            raise InvalidConfigError("rest.ssl.client.auth needs rest.ssl.ca.location")
        self.files.read()  # checked now: a bad file stops the start with a clear error

    def uvicorn_options(self) -> dict[str, Any]:
        settings = self.settings
        return {
            "ssl_certfile": settings.rest_ssl_certificate_location,
            "ssl_keyfile": settings.rest_ssl_key_location,
            "ssl_ca_certs": settings.rest_ssl_ca_location or None,
            "ssl_cert_reqs": _CERT_REQS[settings.rest_ssl_client_auth],
        }

    def client_context(self) -> ssl.SSLContext:
        """Forwarding to another gateway: its certificate checked against our CA, ours presented."""
        context = ssl.create_default_context(cafile=self.settings.rest_ssl_ca_location or None)
        context.load_cert_chain(self.settings.rest_ssl_certificate_location, self.settings.rest_ssl_key_location)
        return context

    async def follow(self, listening: Callable[[], ssl.SSLContext | None]) -> None:
        """Load changed files into the listener's context (new handshakes use them)."""
        while True:
            await asyncio.sleep(RELOAD_CHECK_S)
            context = listening()
            if context is None or not self.files.changed():
                continue
            try:
                self.files.read()
                context.load_cert_chain(
                    self.settings.rest_ssl_certificate_location, self.settings.rest_ssl_key_location
                )
                if self.settings.rest_ssl_ca_location:
                    with contextlib.suppress(ssl.SSLError):
                        context.load_verify_locations(self.settings.rest_ssl_ca_location)
            except (InvalidConfigError, ssl.SSLError, OSError) as error:
                log.error("tls_reload_failed", error=str(error))
                continue
            log.info("tls_certificate_reloaded", certificate=self.settings.rest_ssl_certificate_location)
