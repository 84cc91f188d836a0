"""The broker's registration in etcd: `/tidelog/brokers/ids/{id}` under a lease kept alive.

The key vanishes when the broker dies (its lease expires after `broker.session.timeout.ms`) or
stops cleanly (the lease is revoked): the controller watches the prefix and moves leadership.
A broker whose session is lost registers again with a new one.

A new life (a restart) takes the key over at once from an earlier life whose lease has not expired
yet, instead of waiting up to a session for it: the registration carries the incarnation, so the
controller sees a new life, takes it out of every ISR, moves the leadership it held, and fences
whatever the earlier life still sends (KIP-380). The earlier lease is revoked. A live process that
finds its key held by another life when it re-registers stops instead of taking the key back: two
processes configured with one broker id then leave one running, not both alternating.

A lost session is this process's verdict, reached on its own clock, and etcd may expire the lease
a moment later: a re-registration that finds its own life's key still there moves the key onto the
new lease. Left on the old one, the key would vanish with it and the broker, alive and believing
itself registered, would stay out of the controller's view for good.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Final

import structlog
from etcd3aio import Etcd3Client
from etcd3aio.kv import KVService

from tidelog.server_common.etcd.compare import compare_mod_revision
from tidelog.server_common.etcd.session import ETCD_UNREACHABLE, Session, new_session
from tidelog.server_common.metadata import BrokerRegistration, broker_key

__all__ = ["Registration"]

REGISTER_RETRY_S: Final = 0.5

log = structlog.get_logger(__name__)


class Registration:
    def __init__(
        self,
        etcd: Etcd3Client,
        broker: BrokerRegistration,
        *,
        ttl_s: int,
        on_replaced: Callable[[], None] = lambda: None,
        on_lost: Callable[[], None] = lambda: None,
        on_restored: Callable[[], None] = lambda: None,
    ) -> None:
        self.etcd = etcd
        self.broker = broker
        self.ttl_s = ttl_s
        self.on_replaced = on_replaced  # another life holds our key: this process must stop
        self.on_lost = on_lost  # our session may have expired: the controller may move our leaderships
        self.on_restored = on_restored  # registered again under a new session
        self.session: Session | None = None
        self._task: asyncio.Task[None] | None = None

    async def register(self) -> None:
        """Register once (taking the key over from an earlier life), then keep registered."""
        await self._register_once(take_over=True)
        self._task = asyncio.create_task(self._stay_registered())

    async def _register_once(self, *, take_over: bool) -> bool:
        """Put our registration under a new session; False if another life holds the key."""
        assert self.etcd.kv is not None
        key = broker_key(self.broker.broker_id)
        log.info("broker_registering", broker=self.broker.broker_id)
        session = await new_session(self.etcd, ttl_s=self.ttl_s, holder=f"broker-{self.broker.broker_id}")
        try:
            return await self._put_registration(session, key, take_over=take_over)
        except ETCD_UNREACHABLE:
            await session.close(revoke=False)  # etcd went away again: its lease expires by itself
            raise

    async def _put_registration(self, session: Session, key: str, *, take_over: bool) -> bool:
        assert self.etcd.kv is not None
        while True:
            response = await self.etcd.kv.txn(
                compare=[KVService.txn_compare_create_revision(key, 0)],
                success=[KVService.txn_op_put(key, self.broker.to_json(), lease=session.lease_id)],
                failure=[KVService.txn_op_get(key)],
            )
            if response.succeeded:
                break
            held = response.responses[0].response_range.kvs
            if not held:
                continue  # the old lease expired between the compare and the read: try again
            holder = BrokerRegistration.from_json(held[0].value)
            ours = holder.incarnation == self.broker.incarnation
            if ours and int(held[0].lease) == session.lease_id:
                break  # ours already (a retry after an answer we did not see)
            if not ours and not take_over:
                await session.close(revoke=True)
                log.error(
                    "broker_id_taken_by_another_life",
                    broker=self.broker.broker_id,
                    holder=holder.incarnation,
                    endpoint=f"{holder.host}:{holder.port}",
                )
                return False
            replaced = await self.etcd.kv.txn(
                compare=[compare_mod_revision(key, int(held[0].mod_revision))],
                success=[KVService.txn_op_put(key, self.broker.to_json(), lease=session.lease_id)],
            )
            if replaced.succeeded:
                # Ours under a lost session too: this session's clock ran out before etcd's, and
                # the old lease, once etcd expires it, would delete the key it still holds.
                log.info(
                    "broker_registration_taken_over",
                    broker=self.broker.broker_id,
                    previous=holder.incarnation,
                    previous_lease=hex(int(held[0].lease)),
                )
                assert self.etcd.lease is not None
                with contextlib.suppress(Exception):  # already expired: nothing to revoke
                    await self.etcd.lease.revoke(int(held[0].lease))
                break
        self.session = session
        log.info("broker_registered", broker=self.broker.broker_id, lease=hex(session.lease_id))
        return True

    async def _stay_registered(self) -> None:
        while True:
            assert self.session is not None
            await self.session.done.wait()
            log.warning("broker_session_lost", broker=self.broker.broker_id)
            self.on_lost()
            while True:
                try:
                    registered = await self._register_once(take_over=False)
                    break
                except ETCD_UNREACHABLE as error:  # etcd still unreachable: keep trying, as long as it takes
                    log.info("broker_register_retry", broker=self.broker.broker_id, error=repr(error))
                    await asyncio.sleep(REGISTER_RETRY_S)
            if not registered:
                self.session = None
                self.on_replaced()
                return
            self.on_restored()

    async def deregister(self) -> None:
        """Revoke the lease: the controller sees this broker leave at once."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self.session is not None:
            await self.session.close(revoke=True)
