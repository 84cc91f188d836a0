"""Every assignor: complete, each partition once, balanced within one; sticky ones keep ownership."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidelog.client.assignors import (
    ASSIGNORS,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from tidelog.client.cluster_metadata import TopicPartition

TOPICS = {"a": 5, "b": 3, "c": 8}

members_strategy = st.dictionaries(st.text("mnopq", min_size=1, max_size=3), st.just(None), min_size=1, max_size=7)


def _all(partitions: dict[str, int]) -> list[TopicPartition]:
    return [TopicPartition(topic, p) for topic, count in sorted(partitions.items()) for p in range(count)]


@pytest.mark.parametrize("name", ["range", "roundrobin", "sticky"])
@settings(max_examples=60, deadline=None)
@given(members=members_strategy)
def test_complete_and_each_partition_once(name: str, members: dict[str, None]) -> None:
    subscriptions = {member: Subscription(sorted(TOPICS)) for member in members}
    result = ASSIGNORS[name].assign(subscriptions, TOPICS)
    assigned = [tp for partitions in result.values() for tp in partitions]
    assert sorted(assigned) == _all(TOPICS)


@pytest.mark.parametrize("name", ["roundrobin", "sticky", "cooperative-sticky"])
@settings(max_examples=60, deadline=None)
@given(members=members_strategy)
def test_balanced_within_one_from_scratch(name: str, members: dict[str, None]) -> None:
    subscriptions = {member: Subscription(sorted(TOPICS)) for member in members}
    sizes = [len(partitions) for partitions in ASSIGNORS[name].assign(subscriptions, TOPICS).values()]
    assert max(sizes) - min(sizes) <= 1


@settings(max_examples=100, deadline=None)
@given(
    before=members_strategy,
    joining=st.lists(st.text("xyz", min_size=1, max_size=2), max_size=3),
    leaving=st.integers(0, 3),
)
def test_sticky_keeps_the_most_previous_ownership(before: dict[str, None], joining: list[str], leaving: int) -> None:
    sticky = ASSIGNORS["sticky"]
    first = sticky.assign({member: Subscription(sorted(TOPICS)) for member in before}, TOPICS)
    stayers = sorted(before)[leaving:] or sorted(before)[:1]
    after = {member: Subscription(sorted(TOPICS), first[member]) for member in stayers}
    after.update({member: Subscription(sorted(TOPICS)) for member in joining if member not in after})
    second = sticky.assign(after, TOPICS)
    total = len(_all(TOPICS))
    ceiling = -(-total // len(after))
    floor = total // len(after)
    for member in stayers:
        kept = set(first[member]) & set(second[member])
        # The most it can keep: what it had, capped by its balanced share.
        assert len(kept) >= min(len(first[member]), floor), (member, first[member], second[member])
    sizes = [len(partitions) for partitions in second.values()]
    assert max(sizes) - min(sizes) <= 1 and max(sizes) <= ceiling
    assert sorted(tp for partitions in second.values() for tp in partitions) == _all(TOPICS)


def test_cooperative_sticky_revokes_only_what_moves() -> None:
    cooperative = ASSIGNORS["cooperative-sticky"]
    first = cooperative.assign({"m1": Subscription(["c"])}, {"c": 8})
    assert len(first["m1"]) == 8
    # m2 joins: m1 keeps 4, and the 4 that move are assigned to nobody this round ...
    second = cooperative.assign({"m1": Subscription(["c"], first["m1"]), "m2": Subscription(["c"])}, {"c": 8})
    assert len(second["m1"]) == 4 and second["m2"] == []
    assert set(second["m1"]) <= set(first["m1"])
    # ... m1 revokes them and rejoins; the next round gives them to m2.
    third = cooperative.assign(
        {"m1": Subscription(["c"], second["m1"]), "m2": Subscription(["c"], second["m2"])}, {"c": 8}
    )
    assert third["m1"] == second["m1"] and len(third["m2"]) == 4


def test_range_follows_kafka_ranges() -> None:
    result = ASSIGNORS["range"].assign({"m1": Subscription(["a"]), "m2": Subscription(["a"])}, {"a": 5})
    assert [tp.partition for tp in result["m1"]] == [0, 1, 2]
    assert [tp.partition for tp in result["m2"]] == [3, 4]


def test_unsubscribed_topics_are_not_assigned() -> None:
    result = ASSIGNORS["roundrobin"].assign({"m1": Subscription(["a"]), "m2": Subscription(["b"])}, TOPICS)
    assert {tp.topic for tp in result["m1"]} == {"a"} and {tp.topic for tp in result["m2"]} == {"b"}


def test_subscription_and_assignment_round_trip() -> None:
    subscription = Subscription(["b", "a"], [TopicPartition("a", 1)])
    decoded = decode_subscription(encode_subscription(subscription))
    assert decoded.topics == ["a", "b"] and decoded.owned == [TopicPartition("a", 1)]
    partitions = [TopicPartition("b", 0), TopicPartition("a", 2)]
    assert decode_assignment(encode_assignment(partitions)) == sorted(partitions)
    assert decode_assignment(b"") == []
