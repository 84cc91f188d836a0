"""The Tidelog client: admin, producer and consumer (asyncio), with synchronous facades (sync.py)."""

from tidelog.client.admin import AdminClient, NewTopic, TopicDescription
from tidelog.client.cluster_metadata import TopicPartition
from tidelog.client.consumer import EARLIEST, LATEST, Consumer, ConsumerRecord, FetchedPartition, StoredPartition
from tidelog.client.consumer_records import OffsetRange
from tidelog.client.group_consumer import GroupConsumer, RebalanceListener
from tidelog.client.producer import BulkDelivery, Producer, RecordDelivery, RecordMetadata
from tidelog.client.transaction_manager import ConsumerGroupMetadata, TransactionAbortedError
from tidelog.common.errors import ProducerFencedError
from tidelog.common.security.authorization.acl import (
    AclBinding,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)

__all__ = [
    "EARLIEST",
    "LATEST",
    "AclBinding",
    "AclFilter",
    "AdminClient",
    "BulkDelivery",
    "Consumer",
    "ConsumerGroupMetadata",
    "ConsumerRecord",
    "FetchedPartition",
    "GroupConsumer",
    "NewTopic",
    "OffsetRange",
    "Operation",
    "PatternType",
    "Permission",
    "Producer",
    "ProducerFencedError",
    "RebalanceListener",
    "RecordDelivery",
    "RecordMetadata",
    "ResourceType",
    "StoredPartition",
    "TopicDescription",
    "TopicPartition",
    "TransactionAbortedError",
]
