"""The controller's side of partition reassignment (KIP-455): starting, advancing, finishing and
cancelling moves, kept in the topic record so a new controller carries on where the last stopped.

`reassignment.py` holds the phases as pure functions (plan, target in sync, finish, cancel); this
module applies them to the controller's state through the metadata store. Callers hold the
controller's mutex and push the result to the brokers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

import structlog

from tidelog.common.errors import (
    NoReassignmentInProgressError,
    ReassignmentInProgressError,
    UnknownTopicOrPartitionError,
)
from tidelog.controller import reassignment
from tidelog.controller.controller_role import ControllerRole
from tidelog.controller.metadata_store import MetadataStore
from tidelog.controller.partition_leadership import PartitionLeadership
from tidelog.controller.propagation import Propagation
from tidelog.v1 import common_pb2, controller_pb2

__all__ = ["Reassignments"]

log = structlog.get_logger(__name__)


class Reassignments:
    def __init__(
        self,
        store: MetadataStore,
        role: ControllerRole,
        leadership: PartitionLeadership,
        propagation: Propagation,
    ) -> None:
        self.store = store
        self.role = role
        self.leadership = leadership
        self.propagation = propagation

    def of(self, topic: str, partition: int) -> reassignment.Reassignment | None:
        record = self.store.state.topics[topic].value
        name = str(partition)
        if name not in record.original:
            return None
        return reassignment.Reassignment(
            replicas=record.replicas(partition),
            adding=list(record.adding.get(name, [])),
            removing=list(record.removing.get(name, [])),
            original=list(record.original[name]),
        )

    def ongoing(self) -> list[controller_pb2.OngoingReassignment]:
        found = []
        for topic in sorted(self.store.state.topics):
            for partition in self.store.state.topic_partitions(topic):
                moving = self.of(topic, partition)
                if moving is not None:
                    found.append(
                        controller_pb2.OngoingReassignment(
                            topic=topic,
                            partition=partition,
                            replicas=moving.replicas,
                            adding=moving.adding,
                            removing=moving.removing,
                        )
                    )
        return found

    async def alter(self, entry: controller_pb2.ReassignablePartition) -> None:
        """Start a move to `entry.replicas`, or cancel the one under way."""
        state = self.store.state
        key = (entry.topic, entry.partition)
        if entry.topic not in state.topics or key not in state.partitions:
            raise UnknownTopicOrPartitionError(f"{entry.topic}-{entry.partition} is unknown")
        ongoing = self.of(*key)
        if entry.cancel:
            if ongoing is None:
                raise NoReassignmentInProgressError(f"{entry.topic}-{entry.partition} is not being reassigned")
            await self._finish(key, reassignment.cancel(ongoing), cancelled=True)
            return
        if ongoing is not None:
            raise ReassignmentInProgressError(
                f"{entry.topic}-{entry.partition} is being reassigned to {ongoing.target}; cancel that first"
            )
        current = state.topics[entry.topic].value.replicas(entry.partition)
        moving = reassignment.plan(current, list(entry.replicas), state.brokers)
        if moving.target == current:
            return  # already there (RS alone is no test: a shrink's RS is the current list)
        partition_state = state.partitions[key].value
        record = state.topics[entry.topic].value
        name = str(entry.partition)
        updated = dataclasses.replace(
            record,
            assignment={**record.assignment, name: moving.replicas},
            adding={**record.adding, name: moving.adding},
            removing={**record.removing, name: moving.removing},
            original={**record.original, name: moving.original},
        )
        next_state = partition_state.changed(controller_epoch=self.role.epoch)  # its replicas change
        await self.store.commit_topic(entry.topic, updated, {key: next_state})
        log.info("reassignment_started", topic=entry.topic, partition=entry.partition, **dataclasses.asdict(moving))
        await self.advance([key])  # nothing to add: phase A is already over

    async def advance(self, keys: Iterable[tuple[str, int]] | None = None) -> None:
        """Phase B for every reassignment whose target replicas are all in sync."""
        state = self.store.state
        if keys is None:
            keys = [
                (topic, int(partition))
                for topic, versioned in state.topics.items()
                for partition in versioned.value.original
            ]
        for key in list(keys):
            if key[0] not in state.topics or key not in state.partitions:
                continue
            moving = self.of(*key)
            if moving is not None and reassignment.target_in_sync(moving, state.partitions[key].value):
                await self._finish(key, moving, cancelled=False)

    async def _finish(self, key: tuple[str, int], moving: reassignment.Reassignment, *, cancelled: bool) -> None:
        state = self.store.state
        topic, partition = key
        next_state = reassignment.finish(moving, state.partitions[key].value, self.leadership.live, self.role.epoch)
        if next_state is None:
            if cancelled:
                raise ReassignmentInProgressError(
                    f"{topic}-{partition}: no original replica is alive and in sync to lead; try again later"
                )
            return  # phase B waits for a replica of the target to be able to lead
        record = state.topics[topic].value
        name = str(partition)
        updated = dataclasses.replace(
            record,
            assignment={**record.assignment, name: moving.target},
            adding={other: brokers for other, brokers in record.adding.items() if other != name},
            removing={other: brokers for other, brokers in record.removing.items() if other != name},
            original={other: brokers for other, brokers in record.original.items() if other != name},
        )
        await self.store.commit_topic(topic, updated, {key: next_state})
        log.info(
            "reassignment_cancelled" if cancelled else "reassignment_completed",
            topic=topic,
            partition=partition,
            replicas=moving.target,
            removed=moving.removing,
        )
        removed = [broker for broker in moving.removing if broker in state.brokers]
        if removed:
            self.propagation.propagate_soon(state.brokers)
            self.propagation.stop_replicas_soon(
                [common_pb2.PartitionState(topic=topic, partition=partition, replicas=removed)]
            )
