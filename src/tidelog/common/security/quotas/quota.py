"""Client quotas as Kafka defines them (KIP-13, KIP-55, KIP-124): which quota applies to a request,
and the rate measurement that says how long to throttle.

Entities are a user, a client id, or both, each possibly `<default>`. For each quota type
separately the most specific configured entity wins, in Kafka's order:

    user+client-id, user+<default client>, user, <default user>+client-id,
    <default user>+<default client>, <default user>, client-id, <default client>

Quotas are per broker (as Kafka's). Rates are measured over `quota.window.num` samples of
`quota.window.size.seconds`; a request that takes the rate above the quota is answered with
`throttle_time_ms = (rate - quota) / quota * window` (Kafka's formula), and the client's next
request to that broker waits that long.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Iterator, Mapping
from typing import Final

from tidelog.common.errors import InvalidRequestError

__all__ = ["CLIENT_ID_METADATA", "DEFAULT", "QuotaEntity", "QuotaKind", "QuotaTable", "RateSensor", "check_values"]

DEFAULT: Final = "<default>"
# The call metadata naming a request's client id (Kafka's request header field): clients send it,
# brokers match client-id quotas on it.
CLIENT_ID_METADATA: Final = "tidelog-client-id"


class QuotaKind(enum.Enum):
    PRODUCER_BYTE_RATE = "producer_byte_rate"
    CONSUMER_BYTE_RATE = "consumer_byte_rate"
    REQUEST_PERCENTAGE = "request_percentage"


@dataclasses.dataclass(frozen=True, slots=True)
class QuotaEntity:
    user: str | None = None  # a user name, DEFAULT, or None (not part of the entity)
    client_id: str | None = None

    def __post_init__(self) -> None:
        if self.user is None and self.client_id is None:
            raise InvalidRequestError("a quota entity names a user, a client id, or both")
        for part in (self.user, self.client_id):
            if part is not None and ("/" in part or "," in part or "=" in part):
                raise InvalidRequestError(f"quota entity part {part!r}: without '/', ',' or '='")

    @property
    def key(self) -> str:
        parts = []
        if self.user is not None:
            parts.append(f"user={self.user}")
        if self.client_id is not None:
            parts.append(f"client-id={self.client_id}")
        return ",".join(parts)

    @classmethod
    def from_key(cls, key: str) -> QuotaEntity:
        fields = dict(part.split("=", 1) for part in key.split(","))
        return cls(fields.get("user"), fields.get("client-id"))

    def __str__(self) -> str:
        return self.key


def _precedence(user: str, client_id: str) -> Iterator[QuotaEntity]:
    yield QuotaEntity(user, client_id)
    yield QuotaEntity(user, DEFAULT)
    yield QuotaEntity(user, None)
    yield QuotaEntity(DEFAULT, client_id)
    yield QuotaEntity(DEFAULT, DEFAULT)
    yield QuotaEntity(DEFAULT, None)
    yield QuotaEntity(None, client_id)
    yield QuotaEntity(None, DEFAULT)


def check_values(values: Mapping[str, float]) -> dict[QuotaKind, float]:
    checked = {}
    for name, value in values.items():
        try:
            kind = QuotaKind(name)
        except ValueError:
            raise InvalidRequestError(
                f"unknown quota {name!r}; known: {', '.join(kind.value for kind in QuotaKind)}"
            ) from None
        if not value > 0:
            raise InvalidRequestError(f"{name} must be above 0, not {value}")
        checked[kind] = float(value)
    return checked


class QuotaTable:
    """The configured quotas (from etcd) and which applies to a (user, client id)."""

    def __init__(self, configured: Mapping[QuotaEntity, Mapping[QuotaKind, float]] | None = None) -> None:
        self.replace(configured or {})

    def replace(self, configured: Mapping[QuotaEntity, Mapping[QuotaKind, float]]) -> None:
        self.configured = {entity: dict(values) for entity, values in configured.items()}
        self._resolved: dict[tuple[str, str, QuotaKind], tuple[QuotaEntity, float] | None] = {}

    def replace_from_etcd(self, contents: Mapping[bytes, bytes], prefix: str) -> None:
        configured = {}
        for key, value in contents.items():
            entity = QuotaEntity.from_key(key.decode()[len(prefix) :])
            configured[entity] = {QuotaKind(name): float(v) for name, v in json.loads(value).items()}
        self.replace(configured)

    def quota_for(self, user: str, client_id: str, kind: QuotaKind) -> tuple[QuotaEntity, float] | None:
        """(the entity whose quota applies, the quota), or None when no quota applies."""
        key = (user, client_id, kind)
        if key not in self._resolved:
            found = None
            for entity in _precedence(user, client_id):
                values = self.configured.get(entity)
                if values is not None and kind in values:
                    found = (entity, values[kind])
                    break
            if len(self._resolved) > 100_000:
                self._resolved.clear()
            self._resolved[key] = found
        return self._resolved[key]


class RateSensor:
    """A rate over the last `samples` windows of `window_s` (Kafka's SampledStat Rate): what one
    quota entity did, for one quota type."""

    def __init__(self, *, samples: int = 11, window_s: float = 1.0) -> None:
        assert samples >= 2 and window_s > 0
        self.samples = samples
        self.window_s = window_s
        self._values = [0.0] * samples
        self._starts = [0.0] * samples
        self._current = 0
        self._first = -1.0

    def record(self, value: float, now: float) -> None:
        if self._first < 0:
            self._first = now
            self._starts[0] = now
        if now - self._starts[self._current] >= self.window_s:
            self._current = (self._current + 1) % self.samples
            self._starts[self._current] = now
            self._values[self._current] = 0.0
        self._values[self._current] += value

    def rate(self, now: float) -> float:
        """Per second, over the windows still current (the elapsed time at least one window less
        one, so a burst just after a quiet spell is not divided by the whole history)."""
        oldest = now - self.samples * self.window_s
        total = sum(v for v, start in zip(self._values, self._starts, strict=True) if start > oldest)
        elapsed = now - max(self._first, oldest)
        return total / max(elapsed, (self.samples - 1) * self.window_s)

    def throttle_ms(self, quota: float, now: float) -> int:
        rate = self.rate(now)
        if rate <= quota:
            return 0
        return int((rate - quota) / quota * self.samples * self.window_s * 1000)
