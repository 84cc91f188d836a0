"""The client's side of SASL/SCRAM-SHA-512: a channel interceptor that logs in on first use, sends
the session with every call, and logs in again when the listener says the session is gone (its
lifetime ended, or the connection was re-established)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, Final

import grpc

from tidelog.common.errors import SaslAuthenticationFailedError, error_for
from tidelog.common.security.authentication.sasl_metadata import SESSION_METADATA
from tidelog.common.security.authentication.scram import MECHANISM, ScramClient, ScramError
from tidelog.v1 import security_pb2, security_pb2_grpc

__all__ = ["SaslLogin"]

SASL_METHOD: Final = "/tidelog.v1.Authentication/SaslAuthenticate"
LOGIN_TIMEOUT_S: Final = 10.0
RENEW_MARGIN: Final = 0.9  # log in again after this share of the session's lifetime


class SaslLogin(grpc.aio.UnaryUnaryClientInterceptor):  # type: ignore[misc]  # (untyped base)
    def __init__(self, user: str, password: str, *, clock: Callable[[], float] = time.monotonic) -> None:
        if not user:
            raise ValueError("SASL_SSL needs sasl.username (and sasl.password)")
        self.user = user
        self._password = password
        self._clock = clock
        self.channel: grpc.aio.Channel | None = None  # set once the channel exists
        self._session = ""
        self._renew_at = 0.0
        self._lock = asyncio.Lock()

    async def _login(self) -> str:
        assert self.channel is not None
        stub = security_pb2_grpc.AuthenticationStub(self.channel)
        client = ScramClient(self.user, self._password)
        first = await stub.SaslAuthenticate(
            security_pb2.SaslAuthenticateRequest(mechanism=MECHANISM, auth_bytes=client.first()),
            timeout=LOGIN_TIMEOUT_S,
        )
        if first.error_code:
            raise error_for(first.error_code, first.error_message)
        try:
            # PBKDF2 takes milliseconds: off the event loop.
            final_message = await asyncio.to_thread(client.final, first.auth_bytes)
        except ScramError as error:
            raise SaslAuthenticationFailedError(str(error)) from None
        final = await stub.SaslAuthenticate(
            security_pb2.SaslAuthenticateRequest(
                mechanism=MECHANISM, auth_bytes=final_message, exchange=first.exchange
            ),
            timeout=LOGIN_TIMEOUT_S,
        )
        if final.error_code:
            raise error_for(final.error_code, final.error_message)
        try:
            client.verify(final.auth_bytes)
        except ScramError as error:
            raise SaslAuthenticationFailedError(str(error)) from None
        self._renew_at = self._clock() + final.session_lifetime_ms / 1000 * RENEW_MARGIN
        return str(final.session)

    async def _current(self, stale: str = "") -> str:
        async with self._lock:  # one login at a time; the others wait for it
            if not self._session or self._session == stale or self._clock() >= self._renew_at:
                self._session = ""
                self._session = await self._login()
            return self._session

    async def intercept_unary_unary(
        self, continuation: Callable[..., Any], client_call_details: grpc.aio.ClientCallDetails, request: Any
    ) -> Any:
        method = client_call_details.method
        if (method.decode() if isinstance(method, bytes) else method) == SASL_METHOD:  # (bytes in grpc.aio)
            return await continuation(client_call_details, request)
        session = await self._current()
        for attempt in range(2):
            metadata = grpc.aio.Metadata(*(client_call_details.metadata or ()), (SESSION_METADATA, session))
            call = await continuation(client_call_details._replace(metadata=metadata), request)
            try:
                return await call
            except grpc.aio.AioRpcError as error:
                if error.code() != grpc.StatusCode.UNAUTHENTICATED or attempt:
                    raise
                session = await self._current(stale=session)  # a new connection, or the session ended
        raise AssertionError("unreachable")
