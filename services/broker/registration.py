"""The broker's registration in etcd: `/tidelog/brokers/ids/{id}` under a lease kept alive.

The key vanishes when the broker dies (its lease expires after `broker.session.timeout.ms`) or
stops cleanly (the lease is revoked): the controller watches the prefix and moves leadership.
A broker whose session is lost registers again with a new one. Starting while the key is still
held by an earlier incarnation's lease waits (bounded) for that lease to expire.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

import structlog
from etcd3aio import Etcd3Client
from etcd3aio.kv import KVService

from tidelog.common.etcd.session import Session
from tidelog.common.metadata import BrokerRegistration, broker_key

__all__ = ["Registration"]

log = structlog.get_logger(__name__)


class Registration:
    def __init__(self, etcd: Etcd3Client, broker: BrokerRegistration, *, ttl_s: int) -> None:
        self.etcd = etcd
        self.broker = broker
        self.ttl_s = ttl_s
        self.session: Session | None = None
        self._task: asyncio.Task[None] | None = None

    async def register(self) -> None:
        """Register once (waiting out an old incarnation's lease), then keep registered."""
        await self._register_once(deadline=time.monotonic() + 3 * self.ttl_s + 5)
        self._task = asyncio.create_task(self._stay_registered())

    async def _register_once(self, deadline: float) -> None:
        assert self.etcd.kv is not None
        key = broker_key(self.broker.broker_id)
        while True:
            log.info("broker_registering", broker=self.broker.broker_id)
            session = await Session(self.etcd, ttl_s=self.ttl_s).start()
            response = await self.etcd.kv.txn(
                compare=[KVService.txn_compare_create_revision(key, 0)],
                success=[KVService.txn_op_put(key, self.broker.to_json(), lease=session.lease_id)],
            )
            if response.succeeded:
                self.session = session
                log.info("broker_registered", broker=self.broker.broker_id, lease=hex(session.lease_id))
                return
            await session.close()
            log.info("broker_id_still_registered", broker=self.broker.broker_id, waiting_for="the old lease to expire")
            if time.monotonic() > deadline:
                raise RuntimeError(f"broker id {self.broker.broker_id} is registered by another live broker")
            await asyncio.sleep(0.5)

    async def _stay_registered(self) -> None:
        while True:
            assert self.session is not None
            await self.session.done.wait()
            log.warning("broker_session_lost", broker=self.broker.broker_id)
            await self._register_once(deadline=time.monotonic() + 3 * self.ttl_s + 5)

    async def deregister(self) -> None:
        """Revoke the lease: the controller sees this broker leave at once."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self.session is not None:
            await self.session.close(revoke=True)
