"""gRPC channels to other processes, one per endpoint, secured as `SecuritySettings` say.

Every service and client opens its channels here, so TLS, the client certificate and its rotation
are handled once. When the certificate files change (checked at most once a second), new channels
are opened with the new files and the old ones are closed after a grace period, letting calls in
flight finish.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Any, Final

import grpc
import structlog

from tidelog.common.errors import InvalidConfigError
from tidelog.common.grpc_options import GRPC_OPTIONS
from tidelog.common.security.authentication.sasl_client import SaslLogin
from tidelog.common.security.protocol import SecurityProtocol
from tidelog.common.security.tls.credentials import channel_credentials, pem_files_of
from tidelog.common.settings import SecuritySettings

__all__ = ["ChannelPool"]

log = structlog.get_logger(__name__)

CREDENTIALS_CHECK_INTERVAL_S: Final = 1.0
RETIRED_CHANNEL_GRACE_S: Final = 30.0


class ChannelPool:
    def __init__(
        self,
        security: SecuritySettings | None = None,
        *,
        call_metadata: Sequence[tuple[str, str]] = (),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.security = security or SecuritySettings.from_configs()
        # Sent with every call (a gateway naming the REST caller it acts for).
        self._interceptors: list[grpc.aio.ClientInterceptor] = [_CallMetadata(call_metadata)] if call_metadata else []
        self._clock = clock
        self._files = pem_files_of(self.security) if self.security.tls else None
        # Read now: a missing or mismatched file is an error at construction, not at the first call.
        self._credentials = channel_credentials(self._files) if self._files is not None else None
        if self.security.protocol is SecurityProtocol.SASL_SSL and not self.security.sasl_username:
            raise InvalidConfigError("security.protocol=SASL_SSL needs sasl.username and sasl.password")
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._retiring: set[asyncio.Task[None]] = set()
        self._next_check = clock() + CREDENTIALS_CHECK_INTERVAL_S

    def channel(self, endpoint: str) -> grpc.aio.Channel:
        if self._files is not None:
            self._reload_if_changed()
        channel = self._channels.get(endpoint)
        if channel is None:
            if self._credentials is None:
                channel = grpc.aio.insecure_channel(endpoint, options=GRPC_OPTIONS, interceptors=self._interceptors)
            elif self.security.protocol is SecurityProtocol.SASL_SSL:
                # A login per channel (per connection, as Kafka's per-connection SASL handshake).
                login = SaslLogin(self.security.sasl_username, self.security.sasl_password)
                channel = grpc.aio.secure_channel(
                    endpoint, self._credentials, options=GRPC_OPTIONS, interceptors=[*self._interceptors, login]
                )
                login.channel = channel
            else:
                channel = grpc.aio.secure_channel(
                    endpoint, self._credentials, options=GRPC_OPTIONS, interceptors=self._interceptors
                )
            self._channels[endpoint] = channel
        return channel

    def forget_failed(self, endpoint: str) -> bool:
        """Drop the channel to `endpoint` if it is failing to connect; True if it was.

        A channel that failed to connect waits out gRPC's reconnect backoff (up to
        reconnect.backoff.max.ms) before it tries again, and fails every call meanwhile, even once
        the peer is back. Callers whose own backoff paces their attempts (the replica fetcher's
        rounds, the client's calls to brokers) call this before each use and take a new channel,
        which connects at once, as Kafka's fetcher threads start with a new connection for a
        leader they begin to follow."""
        channel = self._channels.get(endpoint)
        if channel is None or channel.get_state(try_to_connect=False) != grpc.ChannelConnectivity.TRANSIENT_FAILURE:
            return False
        del self._channels[endpoint]
        self._retire(channel)
        return True

    def _retire(self, channel: grpc.aio.Channel) -> None:
        """Close in the background, after calls still on it have had RETIRED_CHANNEL_GRACE_S."""
        task = asyncio.get_running_loop().create_task(channel.close(grace=RETIRED_CHANNEL_GRACE_S))
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)

    def _reload_if_changed(self) -> None:
        assert self._files is not None
        now = self._clock()
        if now < self._next_check:
            return
        self._next_check = now + CREDENTIALS_CHECK_INTERVAL_S
        if not self._files.changed():
            return
        try:
            self._credentials = channel_credentials(self._files)
        except InvalidConfigError as error:
            log.error("tls_reload_failed", error=str(error))  # keep the channels of the last good files
            return
        log.info("tls_certificate_reloaded", certificate=self.security.ssl_certificate_location)
        old, self._channels = self._channels, {}
        for channel in old.values():
            self._retire(channel)

    async def close(self) -> None:
        channels, self._channels = list(self._channels.values()), {}
        for channel in channels:
            await channel.close()
        for task in list(self._retiring):
            task.cancel()


class _CallMetadata(grpc.aio.UnaryUnaryClientInterceptor):  # type: ignore[misc]  # (untyped base)
    def __init__(self, metadata: Sequence[tuple[str, str]]) -> None:
        self.metadata = tuple(metadata)

    async def intercept_unary_unary(
        self, continuation: Callable[..., Any], client_call_details: grpc.aio.ClientCallDetails, request: Any
    ) -> Any:
        metadata = grpc.aio.Metadata(*(client_call_details.metadata or ()), *self.metadata)
        return await continuation(client_call_details._replace(metadata=metadata), request)
