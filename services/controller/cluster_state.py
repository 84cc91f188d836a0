"""The active controller's in-memory copy of the cluster metadata held in etcd.

Loaded whole at election (one etcd transaction, so one revision), then kept current by the
controller's own committed writes and the broker watch. Each record keeps the etcd mod revision it
was read or written at: every write compares it, so a change nobody expected fails instead of
overwriting (docs/metadata.md).
"""

from __future__ import annotations

import dataclasses
from typing import Generic, TypeVar

from tidelog.common.metadata import BrokerRegistration, PartitionStateRecord, TopicRecord
from tidelog.v1 import common_pb2

__all__ = ["ClusterState", "Versioned"]


T = TypeVar("T")


@dataclasses.dataclass(slots=True)
class Versioned(Generic[T]):
    value: T
    mod_revision: int


@dataclasses.dataclass(slots=True)
class ClusterState:
    brokers: dict[int, BrokerRegistration] = dataclasses.field(default_factory=dict)
    topics: dict[str, Versioned[TopicRecord]] = dataclasses.field(default_factory=dict)
    partitions: dict[tuple[str, int], Versioned[PartitionStateRecord]] = dataclasses.field(default_factory=dict)

    def topic_partitions(self, topic: str) -> list[int]:
        return sorted(int(partition) for partition in self.topics[topic].value.assignment)

    def partition_proto(self, topic: str, partition: int) -> common_pb2.PartitionState:
        record = self.topics[topic].value
        state = self.partitions.get((topic, partition))
        if state is None:  # created but not yet initialised: offline until the controller does
            # Epochs -1: older than the first real state (epochs 0), which brings the first leader.
            return common_pb2.PartitionState(
                topic=topic,
                partition=partition,
                leader=-1,
                replicas=record.replicas(partition),
                topic_id=record.topic_id,
                leader_epoch=-1,
                partition_epoch=-1,
            )
        return common_pb2.PartitionState(
            topic=topic,
            partition=partition,
            leader=state.value.leader,
            isr=state.value.isr,
            replicas=record.replicas(partition),
            leader_epoch=state.value.leader_epoch,
            partition_epoch=state.value.partition_epoch,
            controller_epoch=state.value.controller_epoch,
            topic_id=record.topic_id,
        )

    def all_partition_protos(self) -> list[common_pb2.PartitionState]:
        return [
            self.partition_proto(topic, partition)
            for topic in sorted(self.topics)
            for partition in self.topic_partitions(topic)
        ]

    def broker_protos(self) -> list[common_pb2.BrokerEndpoint]:
        return [
            common_pb2.BrokerEndpoint(
                broker_id=broker.broker_id,
                host=broker.host,
                port=broker.port,
                rack=broker.rack,
                incarnation=broker.incarnation,
            )
            for broker in sorted(self.brokers.values(), key=lambda broker: broker.broker_id)
        ]
