"""The Tidelog client: admin, producer and consumer (asyncio), with synchronous facades (sync.py)."""

from tidelog.client.admin import AdminClient, NewTopic, TopicDescription
from tidelog.client.cluster_metadata import TopicPartition
from tidelog.client.consumer import EARLIEST, LATEST, Consumer, ConsumerRecord, FetchedPartition
from tidelog.client.group_consumer import GroupConsumer, RebalanceListener
from tidelog.client.producer import BulkDelivery, Producer, RecordDelivery, RecordMetadata

__all__ = [
    "EARLIEST",
    "LATEST",
    "AdminClient",
    "BulkDelivery",
    "Consumer",
    "ConsumerRecord",
    "FetchedPartition",
    "GroupConsumer",
    "NewTopic",
    "Producer",
    "RebalanceListener",
    "RecordDelivery",
    "RecordMetadata",
    "TopicDescription",
    "TopicPartition",
]
