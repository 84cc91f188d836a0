"""What the Kafka listener advertises: each API has a handler, each version range lies within
Kafka's definition of the message, and docs/kafka-protocol.md lists exactly these."""

from __future__ import annotations

import re
from pathlib import Path

from tidelog.broker.kafka_api import (
    acl_apis,
    admin_apis,
    cluster_apis,
    group_apis,
    log_apis,
    quota_apis,
    sasl_apis,
    txn_apis,
)
from tidelog.broker.kafka_api.api_table import SUPPORTED
from tidelog.common.kafka_wire.message_codec import codec, valid_versions

DOC = Path(__file__).parents[3] / "docs" / "kafka-protocol.md"


def test_every_advertised_api_has_one_handler_and_versions_kafka_defines() -> None:
    handled = [
        *cluster_apis.HANDLED,
        *log_apis.HANDLED,
        *group_apis.HANDLED,
        *admin_apis.HANDLED,
        *sasl_apis.HANDLED,
        *txn_apis.HANDLED,
        *acl_apis.HANDLED,
        *quota_apis.HANDLED,
    ]
    assert sorted(handled) == sorted(SUPPORTED)
    for versions in SUPPORTED.values():
        for kind in ("Request", "Response"):
            low, high = valid_versions(versions.message + kind)
            assert low <= versions.low <= versions.high <= high, versions
            codec(versions.message + kind, versions.high)  # compiles


def test_the_docs_list_exactly_the_advertised_apis_and_versions() -> None:
    rows = re.findall(r"^\| (\w+) \| (\d+) \| (\d+)–(\d+) \|$", DOC.read_text(), re.MULTILINE)
    documented = {int(key): (name, int(low), int(high)) for name, key, low, high in rows}
    assert documented == {int(key): (v.message, v.low, v.high) for key, v in SUPPORTED.items()}
