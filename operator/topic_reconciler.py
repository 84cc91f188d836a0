"""Bringing one `Topic` resource's spec into the cluster, through the client library only.

`TopicReconciler.reconcile(spec)` looks at the topic as the cluster has it and moves it one step
towards the spec, as Strimzi's Topic Operator does: create it when missing (or adopt it when it
exists), add partitions (a decrease is refused: Kafka cannot remove partitions), set and remove
configs so the topic holds exactly the spec's, and reassign replicas when `replicas` or
`spec.assignment` differ. It returns an `Outcome` — the Ready condition, the status fields, the
Kubernetes Events to record and when to look again — and changes nothing in Kubernetes itself:
the kopf handlers own that. Calling it again with the same spec does nothing more (idempotent), so
an operator restarted mid-way simply carries on.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Final

from tidelog.client import AdminClient
from tidelog.client.admin import NewTopic, TopicDescription
from tidelog.common.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    TidelogError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)

__all__ = ["Outcome", "TopicReconciler", "TopicSpec", "config_string"]

RETRY_WHILE_MOVING_S: Final = 2.0  # how soon to look again while replicas are being reassigned
RETRY_UNREACHABLE_S: Final = 5.0  # ... while the cluster does not answer
INVALID_SPEC: Final = (InvalidConfigError, InvalidPartitionsError, InvalidReplicationFactorError)


def config_string(value: object) -> str:
    """A config value as Kafka's string form (the CRD takes numbers and booleans as YAML has them)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


@dataclasses.dataclass(frozen=True, slots=True)
class TopicSpec:
    topic_name: str
    partitions: int
    replicas: int
    config: dict[str, str]
    assignment: tuple[tuple[int, ...], ...] | None = None
    deletion_policy: str = "Delete"

    @classmethod
    def from_resource(cls, name: str, spec: Mapping[str, Any]) -> TopicSpec:
        assignment = spec.get("assignment")
        return cls(
            topic_name=spec.get("topicName") or name,
            partitions=int(spec["partitions"]),
            replicas=int(spec["replicas"]),
            config={key: config_string(value) for key, value in (spec.get("config") or {}).items()},
            assignment=tuple(tuple(int(b) for b in replicas) for replicas in assignment) if assignment else None,
            deletion_policy=spec.get("deletionPolicy", "Delete"),
        )


@dataclasses.dataclass(slots=True)
class Outcome:
    ready: bool
    reason: str  # the Ready condition's reason (CamelCase, as Kubernetes conditions have it)
    message: str
    status: dict[str, Any] = dataclasses.field(default_factory=dict)  # .status fields beside conditions
    events: list[tuple[str, str, str]] = dataclasses.field(default_factory=list)  # (type, reason, message)
    retry_after_s: float | None = None  # look again this soon, even without a change


class TopicReconciler:
    def __init__(self, admin: AdminClient) -> None:
        self.admin = admin

    async def reconcile(self, spec: TopicSpec, *, drift: bool = False) -> Outcome:
        """One step towards `spec`. `drift`: the spec did not change since the last reconcile, so
        any difference was made outside Kubernetes, and putting it back is reported as such."""
        events: list[tuple[str, str, str]] = []
        try:
            described = await self._describe(spec.topic_name)
            if described is None:
                created = await self._create(spec, events)
                if created is not None:
                    return created
                described = await self._describe(spec.topic_name)
                if described is None:  # created, but the metadata has not caught up yet
                    return Outcome(
                        False,
                        "Creating",
                        "the topic was created; waiting for its metadata",
                        events=events,
                        retry_after_s=RETRY_WHILE_MOVING_S,
                    )
            current = len(described.partitions)
            if current > spec.partitions:
                return Outcome(
                    False,
                    "NotSupported",
                    f"partitions cannot decrease ({current} → {spec.partitions}); the topic is left as it is",
                    status=_status(spec, described),
                    events=[("Warning", "NotSupported", f"cannot decrease partitions of {spec.topic_name}")],
                )
            if current < spec.partitions:
                await _checked(self.admin.create_partitions({spec.topic_name: spec.partitions}), spec.topic_name)
                events.append(("Normal", "PartitionsAdded", f"{current} → {spec.partitions} partitions"))
                described = await self._describe(spec.topic_name) or described
            await self._apply_configs(spec, described, events, drift=drift)
            moving = await self._reassign(spec, described, events)
        except INVALID_SPEC as error:
            return Outcome(
                False, "InvalidConfig", error.message, events=[*events, ("Warning", "InvalidConfig", error.message)]
            )
        except (TidelogError, ConnectionError) as error:
            message = getattr(error, "message", str(error))
            return Outcome(
                False,
                "ClusterUnavailable",
                f"the cluster did not answer: {message}",
                events=events,
                retry_after_s=RETRY_UNREACHABLE_S,
            )
        status = _status(spec, described)
        if moving:
            status["reassignment"] = moving
            done = moving["done"]
            return Outcome(
                False,
                "Reassigning",
                f"moving replicas: {done} of {moving['partitions']} partitions done",
                status=status,
                events=events,
                retry_after_s=RETRY_WHILE_MOVING_S,
            )
        if status["offlinePartitions"]:
            return Outcome(
                False,
                "PartitionsOffline",
                f"{status['offlinePartitions']} partitions have no leader",
                status=status,
                events=events,
                retry_after_s=RETRY_WHILE_MOVING_S,
            )
        if status["underReplicatedPartitions"]:
            return Outcome(
                False,
                "UnderReplicated",
                f"{status['underReplicatedPartitions']} partitions have replicas out of sync",
                status=status,
                events=events,
                retry_after_s=RETRY_WHILE_MOVING_S,
            )
        return Outcome(True, "Reconciled", "the topic matches its spec", status=status, events=events)

    async def delete(self, spec: TopicSpec) -> Outcome:
        """The resource is being deleted: delete the topic, or with `Retain` only let it go."""
        if spec.deletion_policy == "Retain":
            return Outcome(True, "Retained", f"topic {spec.topic_name} kept (deletionPolicy: Retain)")
        try:
            result = (await self.admin.delete_topics([spec.topic_name]))[spec.topic_name]
        except (TidelogError, ConnectionError) as error:
            message = getattr(error, "message", str(error))
            return Outcome(False, "ClusterUnavailable", message, retry_after_s=RETRY_UNREACHABLE_S)
        if result is not None and not isinstance(result, UnknownTopicOrPartitionError):
            return Outcome(False, "DeleteFailed", result.message, retry_after_s=RETRY_UNREACHABLE_S)
        return Outcome(True, "Deleted", f"topic {spec.topic_name} deleted")

    # ---- steps -----------------------------------------------------------------------------

    async def _describe(self, topic: str) -> TopicDescription | None:
        found = (await self.admin.describe_topics([topic])).get(topic)
        if isinstance(found, UnknownTopicOrPartitionError) or found is None:
            return None
        if isinstance(found, TidelogError):
            raise found
        return found

    async def _create(self, spec: TopicSpec, events: list[tuple[str, str, str]]) -> Outcome | None:
        result = (
            await self.admin.create_topics(
                [NewTopic(spec.topic_name, spec.partitions, spec.replicas, dict(spec.config))]
            )
        )[spec.topic_name]
        if result is None:
            events.append(("Normal", "Created", f"topic {spec.topic_name} created"))
        elif not isinstance(result, TopicAlreadyExistsError):  # created meanwhile by someone else: adopt it
            raise result
        return None

    async def _apply_configs(
        self, spec: TopicSpec, described: TopicDescription, events: list[tuple[str, str, str]], *, drift: bool
    ) -> None:
        changed = {name: value for name, value in spec.config.items() if described.configs.get(name) != value}
        removed = sorted(name for name in described.configs if name not in spec.config)
        if not changed and not removed:
            return
        await _checked(self.admin.alter_configs(spec.topic_name, changed, removed), spec.topic_name)
        what = ", ".join([*(f"{name}={value}" for name, value in sorted(changed.items())), *(f"-{n}" for n in removed)])
        if drift:
            events.append(("Warning", "DriftReverted", f"configs changed outside Kubernetes put back: {what}"))
        else:
            events.append(("Normal", "ConfigChanged", what))
        described.configs.clear()
        described.configs.update(spec.config)

    async def _reassign(
        self, spec: TopicSpec, described: TopicDescription, events: list[tuple[str, str, str]]
    ) -> dict[str, Any] | None:
        """Start moves where the replicas differ from the spec; the moves under way, if any."""
        ongoing = {
            moving.partition: moving
            for moving in await self.admin.list_partition_reassignments()
            if moving.topic == spec.topic_name
        }
        brokers = sorted(broker.broker_id for broker in (await self.admin.describe_cluster()).brokers)
        current = {state.partition: list(state.replicas) for state in described.partitions}
        targets: dict[tuple[str, int], Sequence[int] | None] = {}
        for partition, replicas in sorted(current.items()):
            if partition in ongoing:
                continue
            wanted = _wanted_replicas(spec, partition, replicas, brokers, current)
            if wanted != replicas:
                targets[(spec.topic_name, partition)] = wanted
        if targets:
            results = await self.admin.alter_partition_reassignments(targets)
            refused = {key: error for key, error in results.items() if error is not None}
            if refused:
                (_, partition), error = next(iter(refused.items()))
                raise InvalidReplicationFactorError(f"partition {partition}: {error.message}")
            events.append(("Normal", "ReassignmentStarted", f"{len(targets)} partitions moving to new replicas"))
            ongoing = {
                moving.partition: moving
                for moving in await self.admin.list_partition_reassignments()
                if moving.topic == spec.topic_name
            }
        # Moves started now count as under way even if the controller finished them at once (a
        # shrink has nothing to copy): the metadata read above predates them, so Ready waits for a
        # pass that sees the new replicas.
        pending = sorted(set(ongoing) | {partition for _, partition in targets})
        if not pending:
            return None
        return {  # how far: of all the topic's partitions, those already on the replicas wanted
            "partitions": len(current),
            "done": len(current) - len(pending),
            "moving": [_move(partition, ongoing.get(partition)) for partition in pending],
        }


def _move(partition: int, ongoing: Any) -> dict[str, Any]:
    if ongoing is None:  # started and already finished: nothing left to add or remove
        return {"partition": partition, "adding": [], "removing": []}
    return {"partition": partition, "adding": list(ongoing.adding), "removing": list(ongoing.removing)}


def _wanted_replicas(
    spec: TopicSpec, partition: int, replicas: list[int], brokers: list[int], current: Mapping[int, list[int]]
) -> list[int]:
    """The replicas a partition should have: the spec's assignment, or its present replicas grown or
    shrunk to `spec.replicas` (the preferred leader kept; added replicas on the brokers holding the
    fewest of this topic's replicas)."""
    if spec.assignment is not None and partition < len(spec.assignment):
        return list(spec.assignment[partition])
    if len(replicas) > spec.replicas:
        return replicas[: spec.replicas]
    wanted = list(replicas)
    load = {broker: sum(broker in held for held in current.values()) for broker in brokers}
    for broker in sorted(load, key=lambda b: (load[b], b)):
        if len(wanted) >= spec.replicas:
            break
        if broker not in wanted:
            wanted.append(broker)
    return wanted


def _status(spec: TopicSpec, described: TopicDescription) -> dict[str, Any]:
    return {
        "topicName": spec.topic_name,
        "partitions": len(described.partitions),
        "replicas": max((len(state.replicas) for state in described.partitions), default=0),
        "underReplicatedPartitions": sum(len(state.isr) < len(state.replicas) for state in described.partitions),
        "offlinePartitions": sum(state.leader < 0 for state in described.partitions),
    }


async def _checked(results: Any, topic: str) -> None:
    """Raise the topic's error from a per-topic result map."""
    error = (await results).get(topic)
    if error is not None:
        raise error
