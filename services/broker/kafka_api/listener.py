"""The Kafka-protocol listener: size-prefixed frames over TCP, answered in the order they came.

Kafka's broker serves one request of a connection at a time (it mutes the channel until the
answer is sent), so a producer's pipelined requests append in order — and an acks=all request
holds the next one back for a whole replication round trip: librdkafka then sent requests of
about 38 KB, each waiting some 10 ms. Here the next request starts as soon as the one before lets
it (`KafkaRequestContext.release`): a Produce once its batches are in the leaders' logs, before the
ISR wait (so appends keep their order), a Fetch at once; any other once it is answered. At most
`PIPELINED_REQUESTS_MAX` requests of a connection are in progress; answers go out in order.

A frame larger than `socket.request.max.bytes`, a header or body that does not parse, an unknown
API key or an unsupported version (but ApiVersions, which answers UNSUPPORTED_VERSION with what is
supported, as KIP-511 asks) closes the connection: Kafka's broker does the same, and nothing of a
request that did not parse is ever acted on. At most `max.connections` connections are held.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import struct
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final

import structlog

from tidelog.broker.broker_service import BrokerService
from tidelog.broker.kafka_api import (
    acl_apis,
    admin_apis,
    cluster_apis,
    group_apis,
    log_apis,
    quota_apis,
    sasl_apis,
    txn_apis,
)
from tidelog.broker.kafka_api.acl_apis import AclApis
from tidelog.broker.kafka_api.admin_apis import AdminApis
from tidelog.broker.kafka_api.api_table import BEFORE_LOGIN, SERVED, SUPPORTED, ApiKey
from tidelog.broker.kafka_api.cluster_apis import ClusterApis, api_versions_body
from tidelog.broker.kafka_api.group_apis import GroupApis
from tidelog.broker.kafka_api.listener_security import ConnectionLogin, server_ssl_context
from tidelog.broker.kafka_api.log_apis import LogApis
from tidelog.broker.kafka_api.produce_sequences import ProduceSequences
from tidelog.broker.kafka_api.quota_apis import QuotaApis
from tidelog.broker.kafka_api.request_context import KafkaRequestContext, RequestAbortedError
from tidelog.broker.kafka_api.sasl_apis import SaslApis
from tidelog.broker.kafka_api.txn_apis import TxnApis
from tidelog.broker.request_metrics import REQUESTS, TOTAL_TIME_MS
from tidelog.common.channels import ChannelPool
from tidelog.common.errors import ErrorCode
from tidelog.common.kafka_wire.primitives import MalformedFrameError
from tidelog.common.kafka_wire.request_frames import UnsupportedVersionError, frame_response, parse_request
from tidelog.common.settings import SecuritySettings
from tidelog.server_common.security.authentication.interceptor import current_principal
from tidelog.server_common.security.authentication.sasl_server import SaslSessions

__all__ = ["KafkaListener"]

log = structlog.get_logger(__name__)

Message = dict[str, Any]
Handler = Callable[[Message, int, KafkaRequestContext], Awaitable[Message | None]]
SIZE: Final = struct.Struct(">i")
FRAME_SHOWN: Final = 48  # bytes of a malformed request put in the log line that reports it
# Requests served by forwarding (groups, admin, transactions): counted here in Kafka's request
# metrics (RequestMetrics by request name); the rest are counted by BrokerService as on gRPC.
FORWARDED: Final = frozenset(
    set(group_apis.HANDLED)
    | set(admin_apis.HANDLED)
    | set(acl_apis.HANDLED)
    | set(quota_apis.HANDLED)
    | (set(txn_apis.HANDLED) - {ApiKey.INIT_PRODUCER_ID})
)
PIPELINED_REQUESTS_MAX: Final = 8  # requests of one connection in progress at once (librdkafka sends up to 5)


class KafkaListener:
    def __init__(
        self,
        service: BrokerService,
        broker_id: int,
        cluster_id: str,
        channels: ChannelPool,
        *,
        request_max_bytes: int,
        connections_max: int,
        idle_ms: int = 600_000,
        security: SecuritySettings,
        sessions: SaslSessions | None = None,
    ) -> None:
        self.security = security
        self.idle_s = idle_ms / 1000  # connections.max.idle.ms
        self.sessions = sessions  # SASL_SSL: the SCRAM credentials (the gRPC listener's)
        self.request_max_bytes = request_max_bytes
        self.connections_max = connections_max
        cluster = ClusterApis(service, broker_id, cluster_id)
        data = LogApis(service)
        groups = GroupApis(service, channels, lambda: self.advertised)
        admin = AdminApis(service, channels)
        sasl = SaslApis()
        acls = AclApis(admin)
        quotas = QuotaApis(admin)
        transactions = TxnApis(service, channels)
        self.advertised = ("", 0)  # host and port clients are told (set once bound)
        self.handlers: dict[int, Handler] = {
            **{int(key): getattr(cluster, name) for key, name in cluster_apis.HANDLED.items()},
            **{int(key): getattr(data, name) for key, name in log_apis.HANDLED.items()},
            **{int(key): getattr(groups, name) for key, name in group_apis.HANDLED.items()},
            **{int(key): getattr(admin, name) for key, name in admin_apis.HANDLED.items()},
            **{int(key): getattr(sasl, name) for key, name in sasl_apis.HANDLED.items()},
            **{int(key): getattr(acls, name) for key, name in acl_apis.HANDLED.items()},
            **{int(key): getattr(quotas, name) for key, name in quota_apis.HANDLED.items()},
            **{int(key): getattr(transactions, name) for key, name in txn_apis.HANDLED.items()},
        }
        assert set(self.handlers) == set(SUPPORTED), "every advertised API has a handler"
        self.server: asyncio.Server | None = None
        self.connections: set[asyncio.Task[None]] = set()

    async def start(self, host: str, port: int) -> int:
        """Listen; the port bound (the one asked for, or a free one for 0)."""
        self.server = await asyncio.start_server(
            self._accepted, host or None, port, limit=1 << 16, ssl=server_ssl_context(self.security)
        )
        bound: int = self.server.sockets[0].getsockname()[1]
        log.info("kafka_listener_started", host=host, port=bound)
        return bound

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
        for task in list(self.connections):
            task.cancel()
        for task in list(self.connections):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self.server is not None:
            await self.server.wait_closed()

    async def _accepted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        if len(self.connections) >= self.connections_max:
            log.warning("kafka_connection_refused", reason="max.connections", held=len(self.connections))
            writer.close()
            return
        self.connections.add(task)
        peer = writer.get_extra_info("peername") or ("", 0)
        context = KafkaRequestContext(
            str(peer[0]),
            int(peer[1]),
            login=ConnectionLogin(self.security, self.sessions, writer),
            produce_sequences=ProduceSequences(),
        )
        try:
            await self._serve(reader, writer, context)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except MalformedFrameError as error:
            log.info("kafka_request_malformed", peer=context.peer(), error=str(error))
        except RequestAbortedError as error:
            log.info("kafka_request_aborted", peer=context.peer(), error=str(error))
        except Exception:  # a defect: said loudly, and only this connection ends
            log.exception("kafka_request_failed", peer=context.peer())
        finally:
            self.connections.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _serve(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, context: KafkaRequestContext
    ) -> None:
        """Read requests and write answers until either side fails; then both stop."""
        answers: asyncio.Queue[asyncio.Task[bytes | None]] = asyncio.Queue(maxsize=PIPELINED_REQUESTS_MAX)
        reading = asyncio.create_task(self._read_requests(reader, context, answers))
        writing = asyncio.create_task(self._write_answers(writer, answers))
        try:
            done, _ = await asyncio.wait({reading, writing}, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                task.result()  # the reason the connection ends
        finally:
            for task in (reading, writing):
                task.cancel()
            while not answers.empty():
                answers.get_nowait().cancel()
            await asyncio.gather(reading, writing, return_exceptions=True)

    async def _read_requests(
        self,
        reader: asyncio.StreamReader,
        context: KafkaRequestContext,
        answers: asyncio.Queue[asyncio.Task[bytes | None]],
    ) -> None:
        while True:
            try:
                size = SIZE.unpack(await asyncio.wait_for(reader.readexactly(4), self.idle_s))[0]
            except TimeoutError:
                log.info("kafka_connection_idle", peer=context.peer(), idle_s=self.idle_s)
                return  # connections.max.idle.ms without a request: closed, as Kafka's broker does
            if not 0 <= size <= self.request_max_bytes:
                limit = self.request_max_bytes
                raise MalformedFrameError(f"a request of {size} bytes (socket.request.max.bytes {limit})")
            frame = await reader.readexactly(size)
            request_context = dataclasses.replace(context, release=asyncio.Event())
            answer = asyncio.create_task(self._handle_shown(frame, request_context))
            answer.add_done_callback(_released(request_context.release))
            await answers.put(answer)  # (bounded: a client far ahead of its answers waits here)
            await request_context.release.wait()

    @staticmethod
    async def _write_answers(writer: asyncio.StreamWriter, answers: asyncio.Queue[asyncio.Task[bytes | None]]) -> None:
        while True:
            answer = await (await answers.get())
            if answer is not None:
                writer.write(answer)
                await writer.drain()

    async def _handle_shown(self, frame: bytes, context: KafkaRequestContext) -> bytes | None:
        try:
            return await self._handle(frame, context)
        except MalformedFrameError as error:
            raise MalformedFrameError(f"{error} (the request began {frame[:FRAME_SHOWN].hex()})") from None

    async def _handle(self, frame: bytes, context: KafkaRequestContext) -> bytes | None:
        try:
            parsed = parse_request(frame, SERVED)
        except UnsupportedVersionError as error:
            if error.api_key != ApiKey.API_VERSIONS:
                raise
            REQUESTS.labels("ApiVersions", ErrorCode.UNSUPPORTED_VERSION.name).inc()
            body = api_versions_body(ErrorCode.UNSUPPORTED_VERSION)
            return frame_response("ApiVersions", error.api_key, 0, error.correlation_id, body)
        context.client_id = parsed.client_id
        login = context.login
        assert login is not None
        if not login.authenticated:
            if parsed.api_key not in BEFORE_LOGIN:
                raise MalformedFrameError(f"{SUPPORTED[parsed.api_key].message} before a SASL login")
        else:
            assert login.principal is not None
            current_principal.set(login.principal)  # (this request's task: the authorisation reads it)
        started = time.perf_counter()
        response = await self.handlers[parsed.api_key](parsed.body, parsed.version, context)
        if parsed.api_key in FORWARDED:  # (the others count themselves, in BrokerService as for gRPC)
            name = SUPPORTED[parsed.api_key].message
            code = response.get("ErrorCode", 0) if response is not None else 0
            REQUESTS.labels(name, ErrorCode(code).name if code in ErrorCode._value2member_map_ else str(code)).inc()
            TOTAL_TIME_MS.labels(name).observe((time.perf_counter() - started) * 1000)
        if response is None:
            return None
        name = SUPPORTED[parsed.api_key].message
        return frame_response(name, parsed.api_key, parsed.version, parsed.correlation_id, response)


def _released(release: asyncio.Event) -> Callable[[asyncio.Task[bytes | None]], None]:
    """Let the connection's next request start once this one is over, whatever its handler did."""

    def done(_: asyncio.Task[bytes | None]) -> None:
        release.set()

    return done
