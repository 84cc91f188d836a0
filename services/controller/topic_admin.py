"""Topic administration: create and delete topics, add partitions, change topic configs.

A topic record is written first (it is the commit: a controller that dies before the partition
states are written leaves them to its successor, which initialises them); then the partition
states. Callers hold the controller's mutex and push the result to the brokers.
"""

from __future__ import annotations

import dataclasses
import random
import uuid
from typing import Final

import structlog
from etcd3aio.kv import KVService

from tidelog.common.config import LOG_CONFIGS, parse_configs
from tidelog.common.errors import (
    InvalidPartitionsError,
    TopicAlreadyExistsError,
    TopicDeletionDisabledError,
    UnknownTopicOrPartitionError,
)
from tidelog.common.settings import ControllerSettings
from tidelog.controller.assignment import assign_replicas, rack_alternated
from tidelog.controller.cluster_state import Versioned
from tidelog.controller.metadata_store import MetadataStore
from tidelog.controller.partition_leadership import PartitionLeadership
from tidelog.server_common.etcd.compare import compare_mod_revision
from tidelog.server_common.metadata import TopicRecord, topic_key, validate_topic_name
from tidelog.v1 import common_pb2, controller_pb2

__all__ = ["PARTITIONS_PER_TOPIC_MAX", "TopicAdmin"]

log = structlog.get_logger(__name__)

PARTITIONS_PER_TOPIC_MAX: Final = 10_000


class TopicAdmin:
    def __init__(
        self,
        store: MetadataStore,
        leadership: PartitionLeadership,
        settings: ControllerSettings,
        rng: random.Random,
    ) -> None:
        self.store = store
        self.leadership = leadership
        self.settings = settings
        self.rng = rng

    def _racks(self) -> dict[int, str]:
        return {broker_id: broker.rack for broker_id, broker in self.store.state.brokers.items()}

    async def create(self, new_topic: controller_pb2.NewTopic, *, validate_only: bool) -> None:
        state = self.store.state
        validate_topic_name(new_topic.name)
        partitions = new_topic.num_partitions if new_topic.num_partitions != -1 else self.settings.num_partitions
        factor = (
            new_topic.replication_factor
            if new_topic.replication_factor != -1
            else self.settings.default_replication_factor
        )
        if partitions > PARTITIONS_PER_TOPIC_MAX:
            raise InvalidPartitionsError(f"at most {PARTITIONS_PER_TOPIC_MAX} partitions per topic")
        parse_configs(dict(new_topic.configs), LOG_CONFIGS)
        if new_topic.name in state.topics:
            raise TopicAlreadyExistsError(f"topic {new_topic.name!r} already exists")
        racks = self._racks()
        assignment = assign_replicas(racks, partitions, factor, start=self.rng.randrange(max(len(racks), 1)))
        if validate_only:
            return
        record = TopicRecord(
            topic_id=uuid.uuid4().hex,
            assignment={str(partition): replicas for partition, replicas in assignment.items()},
            configs=dict(new_topic.configs),
        )
        key = topic_key(new_topic.name)
        if await self.store.exists(key):  # e.g. written by a controller we replaced mid-way
            raise TopicAlreadyExistsError(f"topic {new_topic.name!r} already exists")
        revision = await self.store.commit([KVService.txn_compare_create_revision(key, 0)], {key: record.to_json()})
        state.topics[new_topic.name] = Versioned(record, revision)
        await self.store.write_states(
            {
                (new_topic.name, partition): self.leadership.initial_state(replicas)
                for partition, replicas in assignment.items()
            }
        )
        log.info("topic_created", topic=new_topic.name, partitions=partitions, replication_factor=factor)

    async def delete(self, name: str) -> list[common_pb2.PartitionState]:
        """Delete a topic; its partitions' last states, for the brokers to stop and delete."""
        state = self.store.state
        if not self.settings.delete_topic_enable:
            raise TopicDeletionDisabledError("topic deletion is disabled (delete.topic.enable=false)")
        if name not in state.topics:
            raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
        held = state.topics[name]
        stopped = [state.partition_proto(name, partition) for partition in state.topic_partitions(name)]
        await self.store.commit(
            [compare_mod_revision(topic_key(name), held.mod_revision)], {}, [topic_key(name), f"{topic_key(name)}/"]
        )
        del state.topics[name]
        for key in [key for key in state.partitions if key[0] == name]:
            del state.partitions[key]
        log.info("topic_deleted", topic=name)
        return stopped

    async def add_partitions(self, topic: str, total: int) -> None:
        state = self.store.state
        if topic not in state.topics:
            raise UnknownTopicOrPartitionError(f"topic {topic!r} does not exist")
        held = state.topics[topic]
        current = held.value.partition_count
        if total <= current:
            raise InvalidPartitionsError(f"topic {topic!r} has {current} partitions; the new count must be larger")
        if total > PARTITIONS_PER_TOPIC_MAX:
            raise InvalidPartitionsError(f"at most {PARTITIONS_PER_TOPIC_MAX} partitions per topic")
        racks = self._racks()
        ordered = rack_alternated(racks) if any(racks.values()) else sorted(racks)
        first = held.value.replicas(0)[0]
        start = ordered.index(first) if first in ordered else self.rng.randrange(max(len(ordered), 1))
        factor = len(held.value.replicas(0))
        added = assign_replicas(racks, total - current, factor, start=start, first_partition=current)
        record = dataclasses.replace(
            held.value,
            assignment={**held.value.assignment, **{str(p): replicas for p, replicas in added.items()}},
        )
        await self.store.commit_topic(topic, record)
        await self.store.write_states(
            {(topic, p): self.leadership.initial_state(replicas) for p, replicas in added.items()}
        )

    async def alter_configs(self, change: controller_pb2.ConfigChange) -> None:
        state = self.store.state
        if change.topic not in state.topics:
            raise UnknownTopicOrPartitionError(f"topic {change.topic!r} does not exist")
        held = state.topics[change.topic]
        configs = {**held.value.configs, **dict(change.set)}
        for name in change.delete:
            configs.pop(name, None)
        parse_configs(configs, LOG_CONFIGS)
        await self.store.commit_topic(change.topic, dataclasses.replace(held.value, configs=configs))
