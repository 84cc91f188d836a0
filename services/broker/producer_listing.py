"""DescribeProducers (KIP-664): the producers a partition's leader keeps state for, with their
open transactions, for `tidelog transactions describe-producers` and finding hanging
transactions (one open in a partition that its coordinator no longer knows)."""

from __future__ import annotations

from collections.abc import Callable

from tidelog.broker.replica_manager import ReplicaManager
from tidelog.common.errors import ErrorCode, TidelogError
from tidelog.v1 import broker_pb2

__all__ = ["describe_producers"]


def describe_producers(
    replicas: ReplicaManager, request: broker_pb2.DescribeProducersRequest, readable: Callable[[str], bool]
) -> broker_pb2.DescribeProducersResponse:
    """`readable(topic)`: the caller may Read the topic (Kafka's check for this request)."""
    response = broker_pb2.DescribeProducersResponse()
    for entry in request.partitions:
        result = response.partitions.add(topic=entry.topic, partition=entry.partition)
        if not readable(entry.topic):
            result.error_code = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            continue
        try:
            partition_log = replicas.leader_partition(entry.topic, entry.partition).log
            with partition_log.locked():  # the I/O threads change the state under the log's lock
                producers = [producer.copy() for producer in partition_log.producer_state.producers.values()]
        except TidelogError as error:
            result.error_code, result.error_message = int(error.code), error.message
            continue
        for producer in sorted(producers, key=lambda producer: producer.producer_id):
            result.producers.add(
                producer_id=producer.producer_id,
                producer_epoch=producer.epoch,
                last_sequence=producer.last_sequence,
                last_timestamp=producer.last_timestamp,
                coordinator_epoch=producer.coordinator_epoch,
                current_txn_start_offset=producer.current_txn_first_offset,
            )
    return response
