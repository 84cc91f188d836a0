"""The listener's side of SASL/SCRAM-SHA-512: the Authentication service every service offers
on a SASL_SSL listener, and the sessions its logins open.

A login is Kafka's SaslAuthenticate exchange in two calls; the second answer carries a session id.
The client sends the id with each later call (metadata `tidelog-session`); the session holds for
`connections.max.reauth.ms` and only for the connection (peer address) that logged in, so an id
seen elsewhere is worth nothing. Credentials come from etcd, followed live: a session holds only
while its user's credential is the one it logged in with, so deleting a user, re-creating it or
changing its password ends its sessions at their next call (Kafka's re-authenticate only at
`connections.max.reauth.ms`; ending them sooner costs a client one login).

A login for a user that does not exist is answered as one for a user that does: its salt and
iteration count come from a secret the whole cluster shares (etcd), so every process answers the
same, and the iteration count is drawn from the real users' counts.
"""

from __future__ import annotations

import collections
import os
import secrets
import time
from typing import Any, Final

import grpc
import structlog
from etcd3aio import Etcd3Client

from tidelog.common.errors import ErrorCode
from tidelog.common.security.authentication.principal import Principal
from tidelog.common.security.authentication.sasl_metadata import SESSION_METADATA
from tidelog.common.security.authentication.scram import MECHANISM, ScramError, ScramServer
from tidelog.server_common.etcd.registry import created_once
from tidelog.server_common.metadata import SCRAM_UNKNOWN_USER_SECRET_KEY
from tidelog.server_common.security.authentication.credential_store import CredentialCache
from tidelog.server_common.security.authentication.interceptor import AUTHENTICATION_FAILED as _FAILED
from tidelog.server_common.security.authentication.interceptor import AUTHENTICATION_SUCCEEDED as _SUCCEEDED
from tidelog.v1 import security_pb2, security_pb2_grpc

__all__ = ["SESSION_METADATA", "AuthenticationService", "SaslSessions"]

log = structlog.get_logger(__name__)

EXCHANGE_TIMEOUT_S: Final = 30.0  # a login's two steps must come within this
EXCHANGES_MAX: Final = 10_000  # logins half done at once; the oldest are dropped beyond
SESSIONS_MAX: Final = 100_000


class SaslSessions:
    def __init__(self, etcd: Etcd3Client, *, lifetime_ms: int) -> None:
        self.lifetime_s = lifetime_ms / 1000
        self.credentials = CredentialCache(etcd)
        self._etcd = etcd
        self._secret = b""  # the cluster's (start)
        self._exchanges: collections.OrderedDict[str, tuple[ScramServer, str, float]] = collections.OrderedDict()
        # token → (principal, peer, expiry, the salt of the credential it logged in with)
        self._sessions: collections.OrderedDict[str, tuple[Principal, str, float, bytes]] = collections.OrderedDict()

    async def start(self) -> None:
        self._secret = await created_once(self._etcd, SCRAM_UNKNOWN_USER_SECRET_KEY, os.urandom(32))
        await self.credentials.start()

    async def close(self) -> None:
        await self.credentials.close()

    def principal_of(self, context: Any) -> Principal | None:
        """The principal of the session this call names, if valid for this connection now."""
        token = None
        for key, value in context.invocation_metadata() or ():
            if key == SESSION_METADATA:
                token = value
                break
        if token is None:
            return None
        found = self._sessions.get(token)
        if found is None:
            return None
        principal, peer, expires, salt = found
        if peer != context.peer() or time.monotonic() > expires:
            return None
        credential = self.credentials.get(principal.name)
        if credential is None or credential.salt != salt:  # deleted, re-created or a new password
            self._sessions.pop(token, None)
            return None
        return principal

    def scram_server(self) -> ScramServer:
        """A new login's server side (the Kafka listener keeps one per connection logging in)."""
        assert self._secret, "start() first"
        return ScramServer(self.credentials.get, self._secret, self.credentials.iterations)

    def begin(self, peer: str) -> tuple[str, ScramServer]:
        now = time.monotonic()
        while self._exchanges and (
            len(self._exchanges) >= EXCHANGES_MAX or next(iter(self._exchanges.values()))[2] < now
        ):
            self._exchanges.popitem(last=False)
        exchange = secrets.token_urlsafe(16)
        assert self._secret, "start() first"
        server = ScramServer(self.credentials.get, self._secret, self.credentials.iterations)
        self._exchanges[exchange] = (server, peer, now + EXCHANGE_TIMEOUT_S)
        return exchange, server

    def take(self, exchange: str, peer: str) -> ScramServer | None:
        found = self._exchanges.pop(exchange, None)
        if found is None or found[1] != peer or found[2] < time.monotonic():
            return None
        return found[0]

    def open(self, user: str, peer: str, salt: bytes) -> str:
        """A session for `user`, who logged in with the credential of `salt`."""
        while len(self._sessions) >= SESSIONS_MAX:
            self._sessions.popitem(last=False)
        token = secrets.token_urlsafe(32)
        self._sessions[token] = (Principal("User", user), peer, time.monotonic() + self.lifetime_s, salt)
        return token


class AuthenticationService(security_pb2_grpc.AuthenticationServicer):
    def __init__(self, sessions: SaslSessions) -> None:
        self.sessions = sessions

    async def SaslAuthenticate(  # noqa: N802
        self, request: security_pb2.SaslAuthenticateRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> security_pb2.SaslAuthenticateResponse:
        if request.mechanism != MECHANISM:
            return security_pb2.SaslAuthenticateResponse(
                error_code=int(ErrorCode.UNSUPPORTED_SASL_MECHANISM),
                error_message=f"mechanism {request.mechanism!r} is not offered; use {MECHANISM}",
            )
        peer = context.peer()
        try:
            if not request.exchange:
                exchange, server = self.sessions.begin(peer)
                return security_pb2.SaslAuthenticateResponse(
                    auth_bytes=server.first(request.auth_bytes), exchange=exchange
                )
            continued = self.sessions.take(request.exchange, peer)
            if continued is None:
                _FAILED.inc()
                return security_pb2.SaslAuthenticateResponse(
                    error_code=int(ErrorCode.ILLEGAL_SASL_STATE),
                    error_message="no such login under way on this connection (expired?): start again",
                )
            final, user = continued.final(request.auth_bytes)
            salt = continued.salt
        except ScramError as error:
            _FAILED.inc()
            log.info("sasl_authentication_failed", peer=peer, reason=str(error))
            return security_pb2.SaslAuthenticateResponse(
                error_code=int(ErrorCode.SASL_AUTHENTICATION_FAILED), error_message=str(error)
            )
        _SUCCEEDED.inc()
        return security_pb2.SaslAuthenticateResponse(
            auth_bytes=final,
            session=self.sessions.open(user, peer, salt),
            session_lifetime_ms=int(self.sessions.lifetime_s * 1000),
        )
