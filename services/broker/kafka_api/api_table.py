"""The Kafka APIs this listener serves, with the versions it advertises in ApiVersions.

A version is listed only when every field it carries is honoured (docs/kafka-protocol.md names
what is left at its default). Ranges stop where a version needs what Tidelog has not built yet:
Fetch 13+ names topics by id only, ListOffsets 7+ asks for the max timestamp (KIP-734), Produce
10+ and Metadata beyond 12 are the next steps.
"""

from __future__ import annotations

import enum
from typing import Final, NamedTuple

__all__ = ["SERVED", "SUPPORTED", "ApiKey"]


class ApiKey(enum.IntEnum):
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    API_VERSIONS = 18
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    DESCRIBE_CLUSTER = 60


class Versions(NamedTuple):
    message: str  # Kafka's message name without Request/Response
    low: int
    high: int


SUPPORTED: Final[dict[int, Versions]] = {
    ApiKey.PRODUCE: Versions("Produce", 3, 9),  # 3: the first with v2 record batches
    ApiKey.FETCH: Versions("Fetch", 4, 12),  # 4: v2 record batches, isolation level
    ApiKey.LIST_OFFSETS: Versions("ListOffsets", 1, 6),
    ApiKey.METADATA: Versions("Metadata", 0, 12),
    ApiKey.API_VERSIONS: Versions("ApiVersions", 0, 3),
    ApiKey.INIT_PRODUCER_ID: Versions("InitProducerId", 0, 4),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: Versions("OffsetForLeaderEpoch", 2, 4),
    ApiKey.DESCRIBE_CLUSTER: Versions("DescribeCluster", 0, 1),
}


SERVED: Final = {int(key): (versions.message, versions.low, versions.high) for key, versions in SUPPORTED.items()}
