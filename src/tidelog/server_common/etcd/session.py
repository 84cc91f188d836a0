"""A session: an etcd lease kept alive, with a `done` signal the moment it may be lost.

Shaped like etcd's clientv3/concurrency Session. Keys written with the session's lease vanish
when the holder dies (broker registration, controller election). The keep-alive loop renews every
TTL/3; if no renewal has been acknowledged for a whole TTL (etcd unreachable, process stalled), or
etcd reports the lease gone, `done` is set: whoever holds something through this session must stop
acting on it at once (a controller steps down, a broker re-registers).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any, Final

import grpc
import structlog
from etcd3aio import Etcd3Client, EtcdError
from etcd3aio._protobuf import LeaseKeepAliveRequest

from tidelog.server_common import metrics_catalog

__all__ = ["ETCD_UNREACHABLE", "Session", "lease_gone", "new_session"]

log = structlog.get_logger(__name__)

SESSIONS: Final = metrics_catalog.gauge("tidelog_etcd_sessions")
LOSSES: Final = metrics_catalog.counter("tidelog_etcd_session_losses_total")
KEEPALIVE_FAILURES: Final = metrics_catalog.counter("tidelog_etcd_keepalive_failures_total")
RETRY_INTERVAL_S: Final = 0.2
CLOSE_TIMEOUT_S: Final = 2.0
GRANT_RETRY_S: Final = 0.5  # between two tries to open a session while etcd does not answer
# What a call to etcd raises while etcd does not answer (cut off, quorum lost): worth trying again.
ETCD_UNREACHABLE: Final = (EtcdError, grpc.RpcError, TimeoutError, OSError)


def lease_gone(error: BaseException) -> bool:
    """etcd refused a write under a lease it no longer has ("requested lease not found"): it
    expired the lease on its own clock before this holder's keep-alive noticed (Session.lost)."""
    return (
        isinstance(error, grpc.aio.AioRpcError)
        and error.code() == grpc.StatusCode.NOT_FOUND
        and "lease not found" in (error.details() or "")
    )


async def new_session(client: Etcd3Client, *, ttl_s: int, holder: str) -> Session:
    """A started session, trying again for as long as etcd does not answer (cut off, quorum lost):
    a service that lost its session keeps serving what it still may and is back as soon as etcd
    answers, instead of its re-registration dying on the first timeout. Cancel to give up."""
    while True:
        try:
            return await Session(client, ttl_s=ttl_s).start()
        except ETCD_UNREACHABLE as error:
            log.info("etcd_session_retry", holder=holder, error=repr(error))
            await asyncio.sleep(GRANT_RETRY_S)


class Session:
    def __init__(self, client: Etcd3Client, *, ttl_s: int) -> None:
        assert 1 <= ttl_s <= 3600
        self.client = client
        self.ttl_s = ttl_s
        self.lease_id = 0
        self.done = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._expires_at = 0.0
        self._counted = False  # in SESSIONS: from start() until the session ends, once

    async def start(self) -> Session:
        assert self.client.lease is not None
        granted = await self.client.lease.grant(ttl=self.ttl_s, timeout=self.ttl_s)
        self.lease_id = int(granted.ID)
        self._expires_at = time.monotonic() + int(granted.TTL)
        self._task = asyncio.create_task(self._keep_alive(), name=f"etcd-session-{self.lease_id:x}")
        SESSIONS.inc()
        self._counted = True
        return self

    def _end(self, *, lost: bool) -> None:
        """The session is over: `done` for its holders, and the figures (a loss counted once)."""
        if lost and not self.done.is_set():
            LOSSES.inc()
        self.done.set()
        if self._counted:
            SESSIONS.dec()
            self._counted = False

    def lost(self) -> None:
        """etcd said the lease is gone (`lease_gone`) before the keep-alive saw it: the session is
        over now, for its holders as if the keep-alive had found it (`done`)."""
        if not self.done.is_set():
            log.warning("etcd_session_lease_gone", lease=hex(self.lease_id), seen_by="holder")
            self._end(lost=True)

    def _open_stream(self) -> tuple[Any, asyncio.Queue[Any]]:
        """One long-lived LeaseKeepAlive stream fed by a queue (etcd3aio's helper opens one per renewal,
        and cancelling a task parked on such a one-shot stream was seen to hang for 20 s)."""
        assert self.client.lease is not None
        requests: asyncio.Queue[Any] = asyncio.Queue(maxsize=4)

        async def request_stream() -> AsyncIterator[Any]:
            while True:
                yield await requests.get()

        # The stub is etcd3aio's private attribute: its public API offers only the one-shot stream.
        call = self.client.lease._stub.LeaseKeepAlive(request_stream())
        return call, requests

    async def _keep_alive(self) -> None:
        interval = max(self.ttl_s / 3, 0.2)
        call, requests = self._open_stream()
        try:
            while not self.done.is_set():
                remaining = self._expires_at - time.monotonic()
                if remaining <= 0:
                    log.warning("etcd_session_expired", lease=hex(self.lease_id))
                    self._end(lost=True)
                    return
                try:
                    requests.put_nowait(LeaseKeepAliveRequest(ID=self.lease_id))
                    response = await asyncio.wait_for(call.read(), timeout=min(remaining, interval))
                    if response is grpc.aio.EOF:
                        raise ConnectionError("keep-alive stream closed")
                except (TimeoutError, ConnectionError, asyncio.QueueFull, grpc.aio.AioRpcError) as error:
                    log.info("etcd_keepalive_failed", lease=hex(self.lease_id), error=repr(error))
                    KEEPALIVE_FAILURES.inc()
                    call.cancel()
                    call, requests = self._open_stream()
                    await asyncio.sleep(min(RETRY_INTERVAL_S, max(self._expires_at - time.monotonic(), 0)))
                    continue
                if response.TTL <= 0:
                    log.warning("etcd_session_lease_gone", lease=hex(self.lease_id))
                    self._end(lost=True)
                    return
                self._expires_at = time.monotonic() + int(response.TTL)
                await asyncio.sleep(interval)
        finally:
            call.cancel()

    async def close(self, *, revoke: bool = True) -> None:
        """Stop renewing; with `revoke`, delete the lease now (its keys vanish at once)."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.wait({self._task}, timeout=CLOSE_TIMEOUT_S)  # bounded: never hang a shutdown
            self._task = None
        if revoke and self.lease_id and not self.done.is_set() and self.client.lease is not None:
            with contextlib.suppress(EtcdError, grpc.aio.AioRpcError, TimeoutError):
                await self.client.lease.revoke(self.lease_id, timeout=2)
        self._end(lost=False)
