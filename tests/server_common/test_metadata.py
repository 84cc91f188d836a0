"""The records services keep in etcd (tidelog.server_common.metadata) read back what they wrote,
and what a newer version wrote: a field a process does not know is dropped, not fatal."""

from __future__ import annotations

import json

from tidelog.server_common.metadata import BrokerRegistration


def test_a_registration_round_trips_and_one_with_fields_from_a_newer_broker_still_loads() -> None:
    registration = BrokerRegistration(3, "b3", 9292, "r1", incarnation="x", kafka_host="b3", kafka_port=9092)
    assert BrokerRegistration.from_json(registration.to_json()) == registration
    newer = json.loads(registration.to_json()) | {"listeners_of_tomorrow": ["X://b3:1"]}
    assert BrokerRegistration.from_json(json.dumps(newer).encode()) == registration
