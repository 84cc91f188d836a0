from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from tidelog.common.config import LOG_CONFIGS, parse_configs, render_markdown
from tidelog.common.errors import ErrorCode, InvalidConfigError
from tidelog.common.fixed_limits import FIXED_LIMITS, FixedLimit

ROOT = Path(__file__).resolve().parents[2]


def test_defaults_follow_kafka() -> None:
    parsed = parse_configs({}, LOG_CONFIGS)
    assert parsed["segment.bytes"] == 1024**3
    assert parsed["retention.ms"] == 7 * 24 * 3_600_000
    assert parsed["cleanup.policy"] == ("delete",)
    assert parsed["max.message.bytes"] == 1024 * 1024 + 12


def test_strings_are_converted_and_checked() -> None:
    parsed = parse_configs(
        {"segment.bytes": "8192", "cleanup.policy": "compact, delete", "min.cleanable.dirty.ratio": "0.1"},
        LOG_CONFIGS,
    )
    assert parsed["segment.bytes"] == 8192
    assert parsed["cleanup.policy"] == ("compact", "delete")
    assert parsed["min.cleanable.dirty.ratio"] == 0.1


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"segment.bytes": "12"}, "below the minimum"),
        ({"segment.bytes": "lots"}, "not a valid int"),
        ({"segment.bytes": True}, "not a valid int"),
        ({"min.cleanable.dirty.ratio": "1.5"}, "above the maximum"),
        ({"cleanup.policy": "shred"}, "not one of"),
        ({"cleanup.policy": ""}, "at least one"),
        ({"message.timestamp.type": "Now"}, "not one of"),
        ({"no.such.config": "1"}, "unknown config"),
    ],
)
def test_bad_values_are_invalid_config(raw: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidConfigError, match=message) as caught:
        parse_configs(raw, LOG_CONFIGS)
    assert caught.value.code == ErrorCode.INVALID_CONFIG


def test_configuration_reference_is_generated_from_the_definitions() -> None:
    documented = (ROOT / "docs" / "configuration.md").read_text()
    assert documented == render_markdown(), "run: python -m tidelog.common.config > docs/configuration.md"


@pytest.mark.parametrize("limit", FIXED_LIMITS, ids=lambda limit: limit.attribute)
def test_each_documented_fixed_limit_is_the_codes(limit: FixedLimit) -> None:
    found: object = importlib.import_module(limit.module)
    for name in limit.attribute.split("."):
        found = getattr(found, name)
    assert found == limit.value, f"{limit.module}.{limit.attribute} is {found}, documented {limit.value}"
