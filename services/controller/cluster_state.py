"""The active controller's in-memory copy of the cluster metadata held in etcd.

Loaded whole at election (one etcd transaction, so one revision), then kept current by the
controller's own committed writes and the broker watch. Each record keeps the etcd mod revision it
was read or written at: every write compares it, so a change nobody expected fails instead of
overwriting (docs/metadata.md).
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from tidelog.server_common.metadata import BrokerRegistration, PartitionStateRecord, TopicRecord
from tidelog.v1 import common_pb2

__all__ = ["ClusterState", "Journal", "Versioned"]


T = TypeVar("T")
K = TypeVar("K")
V = TypeVar("V")
PartitionKey = tuple[str, int]


@dataclasses.dataclass(slots=True)
class Versioned(Generic[T]):
    value: T
    mod_revision: int


class Journal:
    """The order in which partition states and topic records last changed, one sequence number per
    change: what changed since a given number costs the changes, not the cluster (delta pushes)."""

    def __init__(self) -> None:
        self.seq = 0
        self._partitions: OrderedDict[PartitionKey, int] = OrderedDict()
        self._topics: OrderedDict[str, int] = OrderedDict()

    def partition_changed(self, key: PartitionKey) -> None:
        self.seq += 1
        self._partitions[key] = self.seq
        self._partitions.move_to_end(key)

    def partition_gone(self, key: PartitionKey) -> None:
        # Partitions go only with their topic, whose own change stands for them (see `since`).
        self._partitions.pop(key, None)

    def topic_changed(self, name: str) -> None:
        self.seq += 1
        self._topics[name] = self.seq
        self._topics.move_to_end(name)

    def since(self, seq: int) -> tuple[list[PartitionKey], list[str]]:
        """Partitions whose state and topics whose record (every partition of it) changed after `seq`."""
        assert 0 <= seq <= self.seq, "a journal position from the future"
        return _newer_than(self._partitions, seq), _newer_than(self._topics, seq)


def _newer_than(changes: OrderedDict[K, int], seq: int) -> list[K]:
    newer = []
    for key, changed_at in reversed(changes.items()):
        if changed_at <= seq:
            break
        newer.append(key)
    return newer


class _Journaled(dict[K, V]):
    """A dict that reports every key set or deleted (the only ways ClusterState's maps change)."""

    def __init__(self, items: dict[K, V], changed: Callable[[K], None], gone: Callable[[K], None]) -> None:
        super().__init__(items)
        self._changed = changed
        self._gone = gone
        for key in items:
            changed(key)

    def __setitem__(self, key: K, value: V) -> None:
        super().__setitem__(key, value)
        self._changed(key)

    def __delitem__(self, key: K) -> None:
        super().__delitem__(key)
        self._gone(key)

    def pop(self, key: K, *default: Any) -> Any:
        present = key in self
        value = super().pop(key, *default)
        if present:
            self._gone(key)
        return value

    def _unjournaled(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError("ClusterState's maps change key by key: the journal sees only those")

    update = setdefault = popitem = clear = _unjournaled


@dataclasses.dataclass(slots=True)
class ClusterState:
    brokers: dict[int, BrokerRegistration] = dataclasses.field(default_factory=dict)
    topics: dict[str, Versioned[TopicRecord]] = dataclasses.field(default_factory=dict)
    partitions: dict[tuple[str, int], Versioned[PartitionStateRecord]] = dataclasses.field(default_factory=dict)
    journal: Journal = dataclasses.field(default_factory=Journal)

    def __post_init__(self) -> None:
        journal = self.journal
        self.topics = _Journaled(self.topics, journal.topic_changed, journal.topic_changed)
        self.partitions = _Journaled(self.partitions, journal.partition_changed, journal.partition_gone)

    def partition_exists(self, key: PartitionKey) -> bool:
        topic = self.topics.get(key[0])
        return topic is not None and 0 <= key[1] < topic.value.partition_count

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

    def broker_protos(self) -> list[common_pb2.BrokerEndpoint]:
        return [
            common_pb2.BrokerEndpoint(
                broker_id=broker.broker_id,
                host=broker.host,
                port=broker.port,
                rack=broker.rack,
                incarnation=broker.incarnation,
                kafka_host=broker.kafka_host,
                kafka_port=broker.kafka_port,
            )
            for broker in sorted(self.brokers.values(), key=lambda broker: broker.broker_id)
        ]
