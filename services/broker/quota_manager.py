"""Client quotas on this broker: produce and fetch bytes and request time per user and client id
(tidelog.common.security.quotas.quota), throttled as Kafka does since KIP-219 — the response says how
long, and the broker holds that client's next request until then (a client that ignores
`throttle_time_ms` is slowed down all the same)."""

from __future__ import annotations

import asyncio
from typing import Any, Final

from etcd3aio import Etcd3Client

from tidelog.common.clock import Monotonic, monotonic
from tidelog.common.security.quotas.quota import CLIENT_ID_METADATA, QuotaKind, QuotaTable, RateSensor
from tidelog.common.settings import BrokerSettings
from tidelog.server_common import metrics_catalog
from tidelog.server_common.etcd.watched_prefix import WatchedPrefix
from tidelog.server_common.metadata import QUOTAS_PREFIX
from tidelog.server_common.security.authentication.interceptor import current_principal

__all__ = ["QuotaManager"]
SENSORS_MAX: Final = 100_000

THROTTLE_MS = metrics_catalog.histogram("tidelog_broker_quota_throttle_ms", buckets=(0, 10, 100, 1000, 10_000, 100_000))
for _kind in QuotaKind:  # every series exported from the start (dashboards and alerts see zeros)
    THROTTLE_MS.labels(_kind.value)


class QuotaManager:
    def __init__(
        self,
        etcd: Etcd3Client | None,
        settings: BrokerSettings,
        *,
        clock: Monotonic = monotonic,
    ) -> None:
        self.table = QuotaTable()
        self.window_num = settings.quota_window_num
        self.window_size_s = float(settings.quota_window_size_seconds)
        self.throttle_max_ms = settings.quota_throttle_max_ms
        self._clock = clock
        self._sensors: dict[tuple[str, str, QuotaKind], RateSensor] = {}
        self._muted_until: dict[tuple[str, str], float] = {}
        self._watch = (
            WatchedPrefix(etcd, QUOTAS_PREFIX, lambda contents: self.table.replace_from_etcd(contents, QUOTAS_PREFIX))
            if etcd is not None
            else None
        )

    async def start(self) -> None:
        if self._watch is not None:
            await self._watch.start()

    async def close(self) -> None:
        if self._watch is not None:
            await self._watch.close()

    @property
    def active(self) -> bool:
        return bool(self.table.configured)

    @staticmethod
    def client_of(context: Any) -> tuple[str, str]:
        """(user, client id) of the call being served."""
        client_id = ""
        for key, value in context.invocation_metadata() or ():
            if key == CLIENT_ID_METADATA:
                client_id = value
                break
        return current_principal.get().name, client_id

    async def wait_unmuted(self, client: tuple[str, str]) -> None:
        """Hold a throttled client's request until its throttle has passed."""
        until = self._muted_until.get(client)
        if until is not None:
            remaining = until - self._clock()
            if remaining > 0:
                await asyncio.sleep(remaining)
            self._muted_until.pop(client, None)

    def record(self, client: tuple[str, str], kind: QuotaKind, value: float) -> int:
        """Count `value` for the client; the throttle (ms) its quota asks for, 0 when within it."""
        user, client_id = client
        found = self.table.quota_for(user, client_id, kind)
        if found is None:
            return 0
        entity, quota = found
        # One sensor per quota entity instance: a <default> user quota holds per user, not shared.
        key = (user if entity.user is not None else "", client_id if entity.client_id is not None else "", kind)
        sensor = self._sensors.get(key)
        if sensor is None:
            if len(self._sensors) >= SENSORS_MAX:
                self._sensors.clear()
            sensor = self._sensors[key] = RateSensor(samples=self.window_num, window_s=self.window_size_s)
        now = self._clock()
        sensor.record(value, now)
        throttle_ms = min(sensor.throttle_ms(quota, now), self.throttle_max_ms)
        if throttle_ms:
            THROTTLE_MS.labels(kind.value).observe(throttle_ms)
            self._muted_until[client] = max(self._muted_until.get(client, 0.0), now + throttle_ms / 1000)
        return throttle_ms
