"""Partition assignors, run by the group leader on the client (as Kafka's consumers do).

range, roundrobin, sticky and cooperative-sticky, by Kafka's names. Members' subscriptions and
the assignment travel as small JSON documents inside the JoinGroup / SyncGroup bytes (the
coordinator never reads them): a subscription names topics and the partitions the member owns
now (for the sticky ones), an assignment lists partitions.

cooperative-sticky (KIP-429): the target is sticky's, but a partition that moves away from a member
still in the group is left unassigned this round; its owner revokes it and rejoins, and the next
round gives it to its new owner. Members revoke only what moves.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Final, Protocol

from tidelog.client.cluster_metadata import TopicPartition

__all__ = [
    "ASSIGNORS",
    "Assignor",
    "Subscription",
    "decode_assignment",
    "decode_subscription",
    "encode_assignment",
    "encode_subscription",
]


@dataclasses.dataclass(frozen=True, slots=True)
class Subscription:
    topics: list[str]
    owned: list[TopicPartition] = dataclasses.field(default_factory=list)


def encode_subscription(subscription: Subscription) -> bytes:
    owned = [[tp.topic, tp.partition] for tp in subscription.owned]
    return json.dumps({"topics": sorted(subscription.topics), "owned": owned}).encode()


def decode_subscription(data: bytes) -> Subscription:
    document = json.loads(data or b"{}")
    return Subscription(
        list(document.get("topics", [])), [TopicPartition(topic, int(p)) for topic, p in document.get("owned", [])]
    )


def encode_assignment(partitions: Sequence[TopicPartition]) -> bytes:
    return json.dumps({"partitions": [[tp.topic, tp.partition] for tp in sorted(partitions)]}).encode()


def decode_assignment(data: bytes) -> list[TopicPartition]:
    if not data:
        return []
    return [TopicPartition(topic, int(p)) for topic, p in json.loads(data).get("partitions", [])]


Assignment = dict[str, list[TopicPartition]]


class Assignor(Protocol):
    name: str
    cooperative: bool

    def assign(self, members: Mapping[str, Subscription], partitions: Mapping[str, int]) -> Assignment: ...


def _subscribed(members: Mapping[str, Subscription], topic: str) -> list[str]:
    return sorted(member for member, subscription in members.items() if topic in subscription.topics)


class RangeAssignor:
    """Per topic: consecutive ranges of partitions, the first members one more when it does not divide."""

    name = "range"
    cooperative = False

    def assign(self, members: Mapping[str, Subscription], partitions: Mapping[str, int]) -> Assignment:
        result: Assignment = {member: [] for member in members}
        for topic, count in sorted(partitions.items()):
            consumers = _subscribed(members, topic)
            if not consumers:
                continue
            share, extra = divmod(count, len(consumers))
            start = 0
            for index, member in enumerate(consumers):
                length = share + (1 if index < extra else 0)
                result[member].extend(TopicPartition(topic, p) for p in range(start, start + length))
                start += length
        return result


class RoundRobinAssignor:
    """Every partition of every topic in turn to the next member subscribed to it."""

    name = "roundrobin"
    cooperative = False

    def assign(self, members: Mapping[str, Subscription], partitions: Mapping[str, int]) -> Assignment:
        result: Assignment = {member: [] for member in members}
        order = sorted(members)
        if not order:
            return result
        turn = 0
        for topic, count in sorted(partitions.items()):
            for partition in range(count):
                for _ in range(len(order)):
                    member = order[turn % len(order)]
                    turn += 1
                    if topic in members[member].topics:
                        result[member].append(TopicPartition(topic, partition))
                        break
        return result


class StickyAssignor:
    """Balanced within one partition per member, keeping as much of what members own as it can."""

    name = "sticky"
    cooperative = False

    def assign(self, members: Mapping[str, Subscription], partitions: Mapping[str, int]) -> Assignment:
        result: Assignment = {member: [] for member in members}
        if not members:
            return result
        every = [TopicPartition(topic, p) for topic, count in sorted(partitions.items()) for p in range(count)]
        valid = set(every)
        eligible = {tp: [m for m in sorted(members) if tp.topic in members[m].topics] for tp in every}
        # Quotas as balanced as the subscriptions allow: at most ceil(total / members) each.
        wanted = [tp for tp in every if eligible[tp]]
        ceiling = -(-len(wanted) // len(members))
        taken: set[TopicPartition] = set()
        for member in sorted(members, key=lambda m: -len(members[m].owned)):
            for tp in members[member].owned:
                if tp in valid and tp not in taken and member in eligible[tp] and len(result[member]) < ceiling:
                    result[member].append(tp)
                    taken.add(tp)
        for tp in wanted:
            if tp in taken:
                continue
            target = min(eligible[tp], key=lambda m: (len(result[m]), m))
            result[target].append(tp)
            taken.add(tp)
        _rebalance(result, eligible)
        return result


def _rebalance(result: Assignment, eligible: Mapping[TopicPartition, list[str]]) -> None:
    """Move partitions from the fullest to the emptiest member until they differ by at most one."""
    while True:
        fullest = max(result, key=lambda m: (len(result[m]), m))
        emptiest = min(result, key=lambda m: (len(result[m]), m))
        if len(result[fullest]) - len(result[emptiest]) <= 1:
            return
        movable = [tp for tp in result[fullest] if emptiest in eligible[tp]]
        if not movable:
            return  # subscriptions differ: this is as balanced as they allow
        tp = movable[-1]
        result[fullest].remove(tp)
        result[emptiest].append(tp)


class CooperativeStickyAssignor(StickyAssignor):
    name = "cooperative-sticky"
    cooperative = True

    def assign(self, members: Mapping[str, Subscription], partitions: Mapping[str, int]) -> Assignment:
        target = super().assign(members, partitions)
        owner = {tp: member for member, subscription in members.items() for tp in subscription.owned}
        return {
            member: [tp for tp in assigned if owner.get(tp, member) == member] for member, assigned in target.items()
        }


ASSIGNORS: Final[dict[str, Assignor]] = {
    assignor.name: assignor
    for assignor in (RangeAssignor(), RoundRobinAssignor(), StickyAssignor(), CooperativeStickyAssignor())
}
