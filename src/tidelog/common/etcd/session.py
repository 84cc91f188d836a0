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
from typing import Final

import grpc
import structlog
from etcd3aio import Etcd3Client, EtcdError

__all__ = ["Session"]

log = structlog.get_logger(__name__)

RETRY_INTERVAL_S: Final = 0.2


class Session:
    def __init__(self, client: Etcd3Client, *, ttl_s: int) -> None:
        assert 1 <= ttl_s <= 3600
        self.client = client
        self.ttl_s = ttl_s
        self.lease_id = 0
        self.done = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._expires_at = 0.0

    async def start(self) -> Session:
        assert self.client.lease is not None
        granted = await self.client.lease.grant(ttl=self.ttl_s, timeout=self.ttl_s)
        self.lease_id = int(granted.ID)
        self._expires_at = time.monotonic() + int(granted.TTL)
        self._task = asyncio.create_task(self._keep_alive(), name=f"etcd-session-{self.lease_id:x}")
        return self

    async def _renew_once(self) -> int:
        """One keep-alive round trip; returns the TTL etcd granted (≤ 0: the lease is gone)."""
        assert self.client.lease is not None
        stream = self.client.lease.keep_alive(self.lease_id)
        try:
            async for response in stream:
                return int(response.TTL)
            return 0
        finally:
            stream.cancel()

    async def _keep_alive(self) -> None:
        interval = max(self.ttl_s / 3, 0.2)
        while not self.done.is_set():
            remaining = self._expires_at - time.monotonic()
            if remaining <= 0:
                log.warning("etcd_session_expired", lease=hex(self.lease_id))
                self.done.set()
                return
            try:
                ttl = await asyncio.wait_for(self._renew_once(), timeout=min(remaining, interval))
            except (TimeoutError, grpc.aio.AioRpcError, EtcdError) as error:
                log.info("etcd_keepalive_failed", lease=hex(self.lease_id), error=str(error))
                await asyncio.sleep(min(RETRY_INTERVAL_S, max(self._expires_at - time.monotonic(), 0)))
                continue
            if ttl <= 0:
                log.warning("etcd_session_lease_gone", lease=hex(self.lease_id))
                self.done.set()
                return
            self._expires_at = time.monotonic() + ttl
            await asyncio.sleep(interval)

    async def close(self, *, revoke: bool = True) -> None:
        """Stop renewing; with `revoke`, delete the lease now (its keys vanish at once)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if revoke and self.lease_id and not self.done.is_set() and self.client.lease is not None:
            with contextlib.suppress(EtcdError, grpc.aio.AioRpcError, TimeoutError):
                await self.client.lease.revoke(self.lease_id, timeout=2)
        self.done.set()
