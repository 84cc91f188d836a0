"""The active controller's watch on every registered broker's process (crash detection).

A broker killed with kill -9 leaves its registration in etcd until its lease expires,
`broker.session.timeout.ms` later; until then nobody moves the partitions it led. The process's
death is visible at once (process_watch.py): its health stream ends and its port refuses
connections. The active controller keeps one health stream per registered broker life; when a
life's process is confirmed gone, the controller revokes the lease that life registered with. The
key vanishes, and the broker watch handles it exactly as an expired lease: out of every ISR,
leaders elsewhere, the new ones told.

Only a confirmed death short-cuts the lease. A frozen broker (it still holds its port) or one cut
off by the network (connects time out) keeps its registration until the lease expires, and is
fenced as before. The lease revoked is the one the watched life registered with, read back with
its incarnation: a new life that took the key over meanwhile is never touched.
`controller.broker.liveness.probe.enable` turns the watch off (leases alone decide).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping

import structlog
from etcd3aio import Etcd3Client

from tidelog.common.channels import ChannelPool
from tidelog.controller.process_watch import process_gone
from tidelog.server_common.metadata import BrokerRegistration, broker_key

__all__ = ["BrokerLiveness"]

log = structlog.get_logger(__name__)

REVOKE_TIMEOUT_S = 2.0

# A broker life is watched by what identifies it: its id, its incarnation and where it listens.
_Life = tuple[int, str, str]


class BrokerLiveness:
    def __init__(self, etcd: Etcd3Client, channels: ChannelPool) -> None:
        self._etcd = etcd
        self._channels = channels
        self._watches: dict[_Life, asyncio.Task[None]] = {}
        self.confirmed_dead = 0  # lives whose lease this controller revoked (each also logged: broker_lease_revoked)

    def follow(self, brokers: Mapping[int, BrokerRegistration]) -> None:
        """Watch every life in `brokers`, and no other (called with each change of the live set)."""
        wanted = {(broker_id, reg.incarnation, reg.endpoint) for broker_id, reg in brokers.items()}
        for life in [life for life in self._watches if life not in wanted]:
            self._watches.pop(life).cancel()
        for life in wanted:
            task = self._watches.get(life)
            if task is None or task.done():  # (done: revoked, yet the same life registered again)
                self._watches[life] = asyncio.create_task(self._watch(*life), name=f"broker-liveness-{life[0]}")

    async def close(self) -> None:
        tasks = list(self._watches.values())
        self._watches.clear()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _watch(self, broker_id: int, incarnation: str, endpoint: str) -> None:
        await process_gone(self._channels, endpoint)
        log.warning("broker_process_gone", broker=broker_id, incarnation=incarnation, endpoint=endpoint)
        try:
            await self._revoke(broker_id, incarnation)
        except Exception as error:  # etcd unreachable: the lease's own expiry decides
            log.warning("broker_lease_revoke_failed", broker=broker_id, error=repr(error))

    async def _revoke(self, broker_id: int, incarnation: str) -> None:
        assert self._etcd.kv is not None and self._etcd.lease is not None
        held = (await self._etcd.kv.get(broker_key(broker_id), timeout=REVOKE_TIMEOUT_S)).kvs
        if not held or BrokerRegistration.from_json(held[0].value).incarnation != incarnation:
            return  # gone already, or a new life holds the key: nothing of the dead one's to revoke
        await self._etcd.lease.revoke(int(held[0].lease), timeout=REVOKE_TIMEOUT_S)
        self.confirmed_dead += 1
        log.warning("broker_lease_revoked", broker=broker_id, incarnation=incarnation, lease=hex(int(held[0].lease)))
