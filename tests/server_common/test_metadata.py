"""The records services keep in etcd (tidelog.server_common.metadata) read back what they wrote,
and what a newer version wrote: a field a process does not know is dropped, not fatal."""

from __future__ import annotations

import dataclasses
import json

import pytest

from tidelog.server_common.metadata import BrokerRegistration, PartitionStateRecord


def test_a_registration_round_trips_and_one_with_fields_from_a_newer_broker_still_loads() -> None:
    registration = BrokerRegistration(3, "b3", 9292, "r1", incarnation="x", kafka_host="b3", kafka_port=9092)
    assert BrokerRegistration.from_json(registration.to_json()) == registration
    newer = json.loads(registration.to_json()) | {"listeners_of_tomorrow": ["X://b3:1"]}
    assert BrokerRegistration.from_json(json.dumps(newer).encode()) == registration


def test_a_partition_state_is_written_as_every_record_is_and_read_back() -> None:
    # Its encoding is written out by hand (a controller writes thousands at once); a field added
    # to the record and not to the encoding fails here.
    state = PartitionStateRecord(leader=2, isr=[2, 3, 1], leader_epoch=4, partition_epoch=9, controller_epoch=5)
    assert state.to_json() == json.dumps(dataclasses.asdict(state), sort_keys=True).encode()
    assert PartitionStateRecord.from_json(state.to_json()) == state


def test_many_records_are_read_at_once_as_each_alone_and_a_bad_one_fails_as_alone() -> None:
    states = [
        PartitionStateRecord(leader=n % 3, isr=[n % 3, 4], leader_epoch=n, partition_epoch=n, controller_epoch=1)
        for n in range(5)
    ]
    newer = json.loads(states[2].to_json()) | {"elr": [4]}  # a field from a newer controller
    values = [state.to_json() for state in states]
    values[2] = json.dumps(newer).encode()
    assert PartitionStateRecord.many_from_json(values) == [PartitionStateRecord.from_json(value) for value in values]
    assert PartitionStateRecord.many_from_json(values) == states
    assert PartitionStateRecord.many_from_json([]) == []
    # Two values that make one array of the right length only together: each is read alone.
    split = [b'{"controller_epoch": 1, "isr": [1], "leader": 1, "leader_epoch": 0, "partition_epoch": 0}, 7', b"[]"]
    with pytest.raises(json.JSONDecodeError):
        PartitionStateRecord.many_from_json(split)
    with pytest.raises(json.JSONDecodeError):
        PartitionStateRecord.many_from_json([values[0], b'{"leader": '])
