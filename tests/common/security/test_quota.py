"""Kafka's quota precedence and rate measurement (tidelog.common.security.quotas.quota)."""

from __future__ import annotations

import pytest

from tidelog.common.errors import InvalidRequestError
from tidelog.common.security.quotas.quota import DEFAULT, QuotaEntity, QuotaKind, QuotaTable, RateSensor, check_values

P = QuotaKind.PRODUCER_BYTE_RATE
C = QuotaKind.CONSUMER_BYTE_RATE


def test_the_most_specific_entity_wins_per_quota_type() -> None:
    table = QuotaTable(
        {
            QuotaEntity(None, DEFAULT): {P: 1.0, C: 1.0},
            QuotaEntity(None, "app"): {P: 2.0},
            QuotaEntity(DEFAULT, None): {P: 3.0},
            QuotaEntity(DEFAULT, "app"): {P: 4.0},
            QuotaEntity("alice", None): {P: 5.0},
            QuotaEntity("alice", DEFAULT): {P: 6.0},
            QuotaEntity("alice", "app"): {P: 7.0},
        }
    )
    assert table.quota_for("alice", "app", P) == (QuotaEntity("alice", "app"), 7.0)
    assert table.quota_for("alice", "other", P) == (QuotaEntity("alice", DEFAULT), 6.0)
    assert table.quota_for("bob", "app", P) == (QuotaEntity(DEFAULT, "app"), 4.0)
    assert table.quota_for("bob", "other", P) == (QuotaEntity(DEFAULT, None), 3.0)
    # Per type: alice has no consumer quota of her own, the <default> client's applies.
    assert table.quota_for("alice", "app", C) == (QuotaEntity(None, DEFAULT), 1.0)
    assert QuotaTable().quota_for("anyone", "", P) is None


def test_a_rate_over_the_windows_and_kafkas_throttle_formula() -> None:
    sensor = RateSensor(samples=11, window_s=1.0)
    now = 100.0
    for _ in range(10):  # 2,000 bytes/s for ten seconds
        sensor.record(2000, now)
        now += 1.0
    assert sensor.rate(now) == pytest.approx(2000, rel=0.01)
    # Quota 1,000 B/s: twice over, so wait (2000 - 1000) / 1000 × 11 s.
    assert sensor.throttle_ms(1000, now) == pytest.approx(11_000, rel=0.01)
    assert sensor.throttle_ms(4000, now) == 0
    # A burst right at the start is spread over (samples - 1) windows, as Kafka does.
    burst = RateSensor(samples=11, window_s=1.0)
    burst.record(10_000, 0.0)
    assert burst.rate(0.0) == pytest.approx(1000)


def test_bad_quota_entities_and_values_are_refused() -> None:
    with pytest.raises(InvalidRequestError):
        QuotaEntity(None, None)
    with pytest.raises(InvalidRequestError):
        QuotaEntity("a/b", None)
    with pytest.raises(InvalidRequestError, match="unknown quota"):
        check_values({"producer_rate": 1})
    with pytest.raises(InvalidRequestError, match="above 0"):
        check_values({"producer_byte_rate": 0})
    assert QuotaEntity.from_key(QuotaEntity(DEFAULT, "x").key) == QuotaEntity(DEFAULT, "x")
