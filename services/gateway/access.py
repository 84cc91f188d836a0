"""Authentication: API keys and bearer tokens mapped to principals.

A credential arrives as `Authorization: Bearer <token>`, `X-API-Key: <key>`, or HTTP Basic with the
key as user name and its secret as password (Confluent Cloud's habit; the credential is then
"key:secret"). The principal it maps to is bound to the request; consumer instances answer only
the principal that created them. With no credentials configured, authentication is off and every
request is the principal "anonymous" (the local dev cluster). The API documents and health are
always open.
"""

from __future__ import annotations

import base64
import binascii
import hmac
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from starlette.types import ASGIApp, Receive, Scope, Send

from tidelog.gateway.responses import error_response
from tidelog.gateway.rest_errors import UNAUTHORIZED, RestError
from tidelog.gateway.scram_basic import ScramBasic

__all__ = ["ANONYMOUS", "Authentication", "load_credentials"]

ANONYMOUS: Final = "anonymous"
OPEN_PATHS: Final = frozenset({"/openapi.json", "/docs", "/docs/oauth2-redirect", "/healthz"})


def load_credentials(path: Path) -> dict[str, str]:
    """`credential principal` per line; blank lines and lines starting with # are skipped."""
    credentials = {}
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        if len(parts) != 2:
            raise ValueError(f"{path}:{number}: expected 'credential principal'")
        credentials[parts[0]] = parts[1]
    return credentials


class Authentication:
    """ASGI middleware: sets scope["state"]["principal"] or answers 401 (error 40101)."""

    def __init__(self, app: ASGIApp, credentials: Mapping[str, str], basic: ScramBasic | None = None) -> None:
        self.app = app
        self.credentials = dict(credentials)
        self.basic = basic  # authentication.method=BASIC: HTTP Basic against the cluster's SCRAM users

    async def _scram_principal(self, headers: Mapping[bytes, bytes]) -> str | None:
        if self.basic is None:
            return None
        scheme, _, value = headers.get(b"authorization", b"").decode("latin-1").partition(" ")
        if scheme.lower() != "basic":
            return None
        try:
            user, separator, password = base64.b64decode(value.strip(), validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return None
        if not separator or not user:
            return None
        return await self.basic.principal(user, password)

    def _principal(self, headers: Mapping[bytes, bytes]) -> str | None:
        offered: str | None = None
        authorization = headers.get(b"authorization", b"").decode("latin-1")
        scheme, _, value = authorization.partition(" ")
        if scheme.lower() == "bearer":
            offered = value.strip()
        elif scheme.lower() == "basic":
            try:
                offered = base64.b64decode(value.strip(), validate=True).decode()
            except (binascii.Error, UnicodeDecodeError):
                return None
        elif b"x-api-key" in headers:
            offered = headers[b"x-api-key"].decode("latin-1")
        if not offered:
            return None
        for credential, principal in self.credentials.items():  # compare_digest: no timing oracle
            if hmac.compare_digest(credential.encode(), offered.encode()):
                return principal
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        state = scope.setdefault("state", {})
        if (not self.credentials and self.basic is None) or scope["path"] in OPEN_PATHS:
            state["principal"] = ANONYMOUS
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        principal = self._principal(headers) or await self._scram_principal(headers)
        if principal is None:
            response = error_response(
                RestError(UNAUTHORIZED, "authentication required: a valid user name and password, API key or token")
            )
            response.headers["www-authenticate"] = 'Basic realm="tidelog"' if self.basic else 'Bearer realm="tidelog"'
            await response(scope, receive, send)
            return
        state["principal"] = principal
        await self.app(scope, receive, send)
