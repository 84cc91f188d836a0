"""Where REST consumer instances live: this gateway's own, and every gateway's in etcd.

Each instance is registered at `/tidelog/gateways/consumers/{group}/{name}` under this gateway's
etcd lease, created only if absent — so a name is unique across all replicas (40902), and the
registrations of a gateway that dies vanish with its lease. A request for an instance another
gateway holds is forwarded there (instance_forwarding.py): clients may talk to any replica behind
one Service. Instances idle for `consumer.instance.timeout.ms` are closed and deregistered. If the
lease is lost while the gateway lives (etcd unreachable beyond the TTL), a new session registers
every instance again. etcd may expire the lease a moment before the gateway's keep-alive sees it:
an instance created then is registered under the new session instead of failing.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

import grpc
import structlog
from etcd3aio import Etcd3Client
from etcd3aio.kv import KVService

from tidelog.common.settings import GatewaySettings
from tidelog.gateway.consumer_instances import ConsumerInstance
from tidelog.gateway.rest_errors import (
    CONSUMER_ALREADY_EXISTS,
    CONSUMER_INSTANCE_NOT_FOUND,
    KAFKA_RETRIABLE_ERROR,
    TOO_MANY_INSTANCES,
    RestError,
)
from tidelog.server_common.etcd.compare import compare_mod_revision
from tidelog.server_common.etcd.session import ETCD_UNREACHABLE, Session, lease_gone, new_session
from tidelog.server_common.metadata import GatewayConsumerRecord, gateway_consumer_key

__all__ = ["InstanceRegistry"]

log = structlog.get_logger(__name__)

EXPIRY_CHECK_S = 1.0


class InstanceRegistry:
    def __init__(
        self,
        etcd: Etcd3Client,
        session: Session,
        *,
        gateway_id: str,
        url: str,
        settings: GatewaySettings,
    ) -> None:
        self.etcd = etcd
        self.session = session
        self.gateway_id = gateway_id
        self.url = url
        self.instance_timeout_s = settings.consumer_instance_timeout_ms / 1000
        self.instances_max = settings.consumer_instances_max
        self.local: dict[tuple[str, str], ConsumerInstance] = {}
        self._creating: set[tuple[str, str]] = set()
        self._renewed = asyncio.Event()  # set (and replaced) each time keep_registered has a new session

    async def add(
        self, group: str, name: str, principal: str, make: Callable[[], ConsumerInstance]
    ) -> ConsumerInstance:
        key = (group, name)
        if key in self.local or key in self._creating:
            raise RestError(CONSUMER_ALREADY_EXISTS, f"consumer instance {name!r} already exists in group {group!r}")
        if len(self.local) + len(self._creating) >= self.instances_max:
            raise RestError(
                TOO_MANY_INSTANCES, f"this gateway holds consumer.instances.max={self.instances_max} instances"
            )
        self._creating.add(key)
        try:
            if not await self._register_new(group, name, principal):
                raise RestError(
                    CONSUMER_ALREADY_EXISTS, f"consumer instance {name!r} already exists in group {group!r}"
                )
            instance = self.local[key] = make()
        finally:
            self._creating.discard(key)
        log.info("consumer_instance_created", group=group, instance=name, principal=principal)
        return instance

    async def _register_new(self, group: str, name: str, principal: str) -> bool:
        """`_register`, once more under the next session if etcd expired this one's lease before the
        keep-alive saw it; etcd not answering is a retriable error (50003), not an internal one."""
        try:
            session = self.session
            try:
                return await self._register(group, name, principal)
            except grpc.aio.AioRpcError as error:
                if not lease_gone(error):
                    raise
            await self._session_after(session)
            return await self._register(group, name, principal)
        except ETCD_UNREACHABLE as error:
            raise RestError(KAFKA_RETRIABLE_ERROR, f"etcd did not register the instance: {error!r}") from error

    async def _session_after(self, stale: Session) -> None:
        """A session after `stale`, whose lease etcd no longer has (keep_registered takes it),
        within one session TTL."""
        if self.session is not stale:
            return
        renewed = self._renewed
        stale.lost()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(renewed.wait(), timeout=stale.ttl_s)
        if self.session is stale:
            raise RestError(KAFKA_RETRIABLE_ERROR, "the gateway's etcd session is being renewed: try again")

    async def _register(self, group: str, name: str, principal: str, *, again: bool = False) -> bool:
        """Create the instance's registration under this gateway's lease; False if it exists (`again`:
        unless it is this gateway's own, left from its lost session)."""
        assert self.etcd.kv is not None
        key = gateway_consumer_key(group, name)
        record = GatewayConsumerRecord(self.gateway_id, self.url, principal)
        put = KVService.txn_op_put(key, record.to_json(), lease=self.session.lease_id)
        created = await self.etcd.kv.txn(
            compare=[KVService.txn_compare_create_revision(key, 0)], success=[put], failure=[KVService.txn_op_get(key)]
        )
        if created.succeeded:
            return True
        held = created.responses[0].response_range.kvs
        if not again or not held or GatewayConsumerRecord.from_json(held[0].value).gateway_id != self.gateway_id:
            return False
        # Ours under a lost session (this gateway's clock ran out before etcd's): moved onto the new
        # lease, or it would vanish when etcd expires the old one, and the instance with it.
        moved = await self.etcd.kv.txn(compare=[compare_mod_revision(key, int(held[0].mod_revision))], success=[put])
        return bool(moved.succeeded)

    async def keep_registered(self) -> None:
        """When the etcd session is lost (etcd unreachable beyond its TTL, the lease revoked), the
        registrations went with it: take a new session and register every instance again. One whose
        name another gateway took meanwhile is closed (that gateway's instance answers now)."""
        while True:
            await self.session.done.wait()
            log.warning("gateway_session_lost", instances=len(self.local))
            # etcd still unreachable: keep serving, keep trying
            self.session = await new_session(self.etcd, ttl_s=self.session.ttl_s, holder="gateway")
            self._renewed.set()
            self._renewed = asyncio.Event()
            for (group, name), instance in list(self.local.items()):
                if not await self._register(group, name, instance.principal, again=True):
                    log.warning("consumer_instance_taken_meanwhile", group=group, instance=name)
                    self.local.pop((group, name), None)
                    async with instance.lock:
                        await instance.close()
            log.info("gateway_session_renewed", lease=hex(self.session.lease_id), instances=len(self.local))

    def get(self, group: str, name: str, principal: str) -> ConsumerInstance:
        instance = self.local.get((group, name))
        # Another principal's instance is answered as a missing one: names cannot be confirmed.
        if instance is None or instance.principal != principal:
            raise RestError(CONSUMER_INSTANCE_NOT_FOUND, f"consumer instance {name!r} not found in group {group!r}")
        instance.touch()
        return instance

    async def owner(self, group: str, name: str) -> GatewayConsumerRecord | None:
        """The registration of an instance (None when no gateway holds it)."""
        assert self.etcd.kv is not None
        found = (await self.etcd.kv.get(gateway_consumer_key(group, name))).kvs
        return GatewayConsumerRecord.from_json(found[0].value) if found else None

    async def remove(self, group: str, name: str) -> None:
        instance = self.local.pop((group, name), None)
        if instance is None:
            return
        assert self.etcd.kv is not None
        with contextlib.suppress(Exception):  # the lease takes it anyway when this gateway stops
            await self.etcd.kv.delete(gateway_consumer_key(group, name))
        async with instance.lock:
            await instance.close()

    async def expire(self) -> None:
        """Close instances idle beyond consumer.instance.timeout.ms (one in use is never idle)."""
        while True:
            await asyncio.sleep(EXPIRY_CHECK_S)
            now = time.monotonic()
            for (group, name), instance in list(self.local.items()):
                if not instance.lock.locked() and now - instance.last_used > self.instance_timeout_s:
                    log.info("consumer_instance_expired", group=group, instance=name)
                    await self.remove(group, name)

    async def close(self) -> None:
        """Close every instance (each leaves its group), then give up the lease."""
        for group, name in list(self.local):
            await self.remove(group, name)
        await self.session.close()
