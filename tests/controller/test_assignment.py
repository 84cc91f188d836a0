from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidelog.common.errors import InvalidPartitionsError, InvalidReplicationFactorError
from tidelog.controller.assignment import assign_replicas, rack_alternated


def test_the_seeds_formula() -> None:
    brokers = {1: "", 2: "", 3: ""}
    assert assign_replicas(brokers, 4, 2, start=0) == {0: [1, 2], 1: [2, 3], 2: [3, 1], 3: [1, 2]}
    assert assign_replicas(brokers, 2, 3, start=1) == {0: [2, 3, 1], 1: [3, 1, 2]}


def test_added_partitions_continue_the_sequence() -> None:
    brokers = {1: "", 2: "", 3: ""}
    full = assign_replicas(brokers, 5, 2, start=2)
    first = assign_replicas(brokers, 3, 2, start=2)
    more = assign_replicas(brokers, 2, 2, start=2, first_partition=3)
    assert {**first, **more} == full


@given(
    st.integers(1, 9).flatmap(lambda n: st.tuples(st.just(n), st.integers(1, n))),
    st.integers(1, 60),
    st.integers(0, 100),
)
def test_replicas_are_distinct_and_leaders_balanced(
    brokers_and_factor: tuple[int, int], partitions: int, start: int
) -> None:
    broker_count, factor = brokers_and_factor
    brokers = {broker_id: "" for broker_id in range(10, 10 + broker_count)}
    assignment = assign_replicas(brokers, partitions, factor, start=start)
    assert sorted(assignment) == list(range(partitions))
    assert all(len(set(replicas)) == factor for replicas in assignment.values())
    leaders = Counter(replicas[0] for replicas in assignment.values())
    assert max(leaders.values()) - min(leaders.get(broker, 0) for broker in brokers) <= 1


def test_rack_aware_replicas_span_racks() -> None:
    brokers = {1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c"}
    assert rack_alternated(brokers) == [1, 3, 5, 2, 4, 6]
    for start in range(6):
        for replicas in assign_replicas(brokers, 12, 3, start=start).values():
            assert len({brokers[broker] for broker in replicas}) == 3


def test_bad_counts_are_specific_errors() -> None:
    with pytest.raises(InvalidPartitionsError):
        assign_replicas({1: ""}, 0, 1, start=0)
    with pytest.raises(InvalidReplicationFactorError, match="larger than the 2 live brokers"):
        assign_replicas({1: "", 2: ""}, 1, 3, start=0)
    with pytest.raises(InvalidReplicationFactorError):
        assign_replicas({1: ""}, 1, 0, start=0)
