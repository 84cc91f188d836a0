"""Replica assignment, the seeds' algorithm (Kafka's AdminUtils before its refinements).

With the live brokers in a list of n and a random start s: partition i's first (preferred)
replica is broker (s + i) mod n and its j-th replica is (s + i + j) mod n. When brokers declare
racks, the list is first interleaved rack by rack (r1-b1, r2-b1, r3-b1, r1-b2, ...), so consecutive
brokers, and therefore the replicas of a partition, sit in different racks while there are at
least as many racks as replicas. Pure functions; the controller passes its own randomness.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence

from tidelog.common.errors import InvalidPartitionsError, InvalidReplicationFactorError

__all__ = ["assign_replicas", "rack_alternated"]


def rack_alternated(brokers: Mapping[int, str]) -> list[int]:
    """Broker ids ordered so that neighbours are in different racks (ids sorted within a rack)."""
    by_rack: dict[str, list[int]] = {}
    for broker_id in sorted(brokers):
        by_rack.setdefault(brokers[broker_id], []).append(broker_id)
    columns = [by_rack[rack] for rack in sorted(by_rack)]
    return [broker for row in itertools.zip_longest(*columns) for broker in row if broker is not None]


def assign_replicas(
    brokers: Mapping[int, str],
    partitions: int,
    replication_factor: int,
    *,
    start: int,
    first_partition: int = 0,
) -> dict[int, list[int]]:
    """partition → replicas (preferred leader first) for partitions first_partition.. +partitions.

    `brokers` maps live broker ids to their racks ("" when none).
    """
    if partitions < 1:
        raise InvalidPartitionsError(f"number of partitions must be at least 1, got {partitions}")
    if replication_factor < 1:
        raise InvalidReplicationFactorError(f"replication factor must be at least 1, got {replication_factor}")
    if replication_factor > len(brokers):
        raise InvalidReplicationFactorError(
            f"replication factor {replication_factor} is larger than the {len(brokers)} live brokers"
        )
    racks_declared = any(brokers.values())
    ordered: Sequence[int] = rack_alternated(brokers) if racks_declared else sorted(brokers)
    count = len(ordered)
    assignment = {}
    for partition in range(first_partition, first_partition + partitions):
        assignment[partition] = [
            ordered[(start + partition + replica) % count] for replica in range(replication_factor)
        ]
    return assignment
