"""The Kafka APIs this listener serves, with the versions it advertises in ApiVersions.

A version is listed only when every field it carries is honoured (docs/kafka-protocol.md names
what is left at its default). Ranges stop where a version needs what Tidelog has not built yet:
Fetch 13+ names topics by id only, ListOffsets 7+ asks for the max timestamp (KIP-734), Produce
10+ and Metadata beyond 12 are the next steps. Group requests are forwarded to the coordinators
(group_apis).
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
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    TXN_OFFSET_COMMIT = 28
    DELETE_RECORDS = 21
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    INCREMENTAL_ALTER_CONFIGS = 44
    DESCRIBE_CLIENT_QUOTAS = 48
    ALTER_CLIENT_QUOTAS = 49
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    SASL_AUTHENTICATE = 36
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
    ApiKey.FIND_COORDINATOR: Versions("FindCoordinator", 0, 3),  # 4: batched keys
    ApiKey.JOIN_GROUP: Versions("JoinGroup", 0, 9),
    ApiKey.SYNC_GROUP: Versions("SyncGroup", 0, 5),
    ApiKey.HEARTBEAT: Versions("Heartbeat", 0, 4),
    ApiKey.LEAVE_GROUP: Versions("LeaveGroup", 0, 5),
    ApiKey.OFFSET_COMMIT: Versions("OffsetCommit", 0, 8),  # 9: KIP-848's member epochs
    ApiKey.OFFSET_FETCH: Versions("OffsetFetch", 0, 7),  # 8: batched groups
    ApiKey.DESCRIBE_GROUPS: Versions("DescribeGroups", 0, 5),
    ApiKey.LIST_GROUPS: Versions("ListGroups", 0, 4),  # 5: group types (KIP-848)
    ApiKey.DELETE_GROUPS: Versions("DeleteGroups", 0, 2),
    ApiKey.CREATE_TOPICS: Versions("CreateTopics", 0, 7),
    ApiKey.DELETE_TOPICS: Versions("DeleteTopics", 0, 6),
    ApiKey.CREATE_PARTITIONS: Versions("CreatePartitions", 0, 3),
    ApiKey.DESCRIBE_CONFIGS: Versions("DescribeConfigs", 0, 4),
    ApiKey.SASL_HANDSHAKE: Versions("SaslHandshake", 1, 1),  # 0: raw tokens outside Kafka's framing
    ApiKey.SASL_AUTHENTICATE: Versions("SaslAuthenticate", 0, 2),
    # Transactions as clients before KIP-890 part 2 speak them (EndTxn 5 bumps the epoch); 4+ of
    # AddPartitionsToTxn is the brokers' batched verification (KIP-890 part 1).
    ApiKey.ADD_PARTITIONS_TO_TXN: Versions("AddPartitionsToTxn", 0, 3),
    ApiKey.ADD_OFFSETS_TO_TXN: Versions("AddOffsetsToTxn", 0, 3),
    ApiKey.END_TXN: Versions("EndTxn", 0, 4),
    ApiKey.TXN_OFFSET_COMMIT: Versions("TxnOffsetCommit", 0, 3),
    ApiKey.DESCRIBE_ACLS: Versions("DescribeAcls", 1, 3),  # 1: pattern types (KIP-290)
    ApiKey.CREATE_ACLS: Versions("CreateAcls", 1, 3),
    ApiKey.DELETE_ACLS: Versions("DeleteAcls", 1, 3),
    ApiKey.ALTER_CONFIGS: Versions("AlterConfigs", 0, 2),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: Versions("IncrementalAlterConfigs", 0, 1),
    ApiKey.DELETE_RECORDS: Versions("DeleteRecords", 0, 2),
    ApiKey.DESCRIBE_CLIENT_QUOTAS: Versions("DescribeClientQuotas", 0, 1),
    ApiKey.ALTER_CLIENT_QUOTAS: Versions("AlterClientQuotas", 0, 1),
}
# Served before a SASL_SSL connection has logged in (anything else closes it).
BEFORE_LOGIN: Final = frozenset({ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})


SERVED: Final = {int(key): (versions.message, versions.low, versions.high) for key, versions in SUPPORTED.items()}
