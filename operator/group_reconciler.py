"""Bringing one `ConsumerGroup` resource in line with its group: status from the coordinators, and
offset resets applied once per `id`, only while the group has no members (Kafka's rule).

`GroupReconciler.reconcile(spec, last_reset=...)` reads the group through `GroupAdmin` (state,
generation, assignor, members and their partitions, committed offsets and lag) and, when the spec
asks for a reset whose `id` has not been applied yet, applies it if the group is empty, or says
why it waits. Deleting the resource deletes the group's committed offsets, again only when empty.
Like the Topic reconciler it returns an `Outcome` and changes nothing in Kubernetes itself.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Mapping
from typing import Any, Final

from tidelog.client import AdminClient, TopicPartition
from tidelog.client.admin import TopicDescription
from tidelog.client.consumer import EARLIEST, LATEST
from tidelog.client.group_admin import GroupAdmin, GroupDescription
from tidelog.common.errors import ErrorCode, TidelogError, error_for
from tidelog.operator.topic_reconciler import Outcome

__all__ = ["GroupReconciler", "GroupSpec", "ResetSpec"]

RETRY_WAITING_S: Final = 5.0  # how soon to look again while a reset waits for the members to leave
RETRY_UNREACHABLE_S: Final = 5.0


@dataclasses.dataclass(frozen=True, slots=True)
class ResetSpec:
    id: str
    to: str  # earliest | latest | timestamp | offset
    timestamp: int | None = None
    offsets: tuple[tuple[str, int, int], ...] = ()  # (topic, partition, offset) for `to: offset`
    topics: tuple[str, ...] = ()  # default: the topics the group has committed offsets for


@dataclasses.dataclass(frozen=True, slots=True)
class GroupSpec:
    group_id: str
    reset: ResetSpec | None = None

    @classmethod
    def from_resource(cls, name: str, spec: Mapping[str, Any]) -> GroupSpec:
        raw = spec.get("resetOffsets")
        reset = None
        if raw:
            reset = ResetSpec(
                id=str(raw["id"]),
                to=str(raw["to"]),
                timestamp=raw.get("timestamp"),
                offsets=tuple((o["topic"], int(o["partition"]), int(o["offset"])) for o in raw.get("offsets") or ()),
                topics=tuple(raw.get("topics") or ()),
            )
        return cls(group_id=spec.get("groupId") or name, reset=reset)


class GroupReconciler:
    def __init__(self, groups: GroupAdmin, admin: AdminClient) -> None:
        self.groups = groups
        self.admin = admin

    async def reconcile(self, spec: GroupSpec, *, last_reset: str | None) -> Outcome:
        events: list[tuple[str, str, str]] = []
        try:
            described = await self._describe(spec.group_id)
            applied = last_reset
            if spec.reset is not None and spec.reset.id != last_reset:
                if described is not None and described.members:
                    status = _status(spec.group_id, described, last_reset)
                    return Outcome(
                        False,
                        "ResetWaiting",
                        f"reset {spec.reset.id!r} waits: the group has {len(described.members)} members "
                        "(offsets are reset only while a group is empty)",
                        status=status,
                        retry_after_s=RETRY_WAITING_S,
                    )
                offsets = await self._reset_offsets(spec.reset, described)
                await self.groups.reset_offsets(spec.group_id, offsets)
                applied = spec.reset.id
                events.append(
                    ("Normal", "OffsetsReset", f"reset {spec.reset.id!r} applied to {len(offsets)} partitions")
                )
                described = await self._describe(spec.group_id)
        except TidelogError as error:
            if error.code == ErrorCode.NON_EMPTY_GROUP:
                return Outcome(False, "ResetWaiting", error.message, retry_after_s=RETRY_WAITING_S)
            if error.code in (ErrorCode.INVALID_REQUEST, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION):
                return Outcome(
                    False, "InvalidReset", error.message, events=[("Warning", "InvalidReset", error.message)]
                )
            return Outcome(False, "ClusterUnavailable", error.message, retry_after_s=RETRY_UNREACHABLE_S)
        except ConnectionError as error:
            return Outcome(False, "ClusterUnavailable", str(error), retry_after_s=RETRY_UNREACHABLE_S)
        status = _status(spec.group_id, described, applied)
        return Outcome(True, "Reconciled", f"group {spec.group_id} is {status['state']}", status=status, events=events)

    async def delete(self, spec: GroupSpec) -> Outcome:
        """The resource is being deleted: delete the group's committed offsets, once it is empty."""
        try:
            result = (await self.groups.delete_groups([spec.group_id]))[spec.group_id]
        except (TidelogError, ConnectionError) as error:
            return Outcome(False, "ClusterUnavailable", str(error), retry_after_s=RETRY_UNREACHABLE_S)
        if result is None or result.code == ErrorCode.GROUP_ID_NOT_FOUND:
            return Outcome(True, "Deleted", f"group {spec.group_id} deleted")
        if result.code == ErrorCode.NON_EMPTY_GROUP:
            return Outcome(
                False, "DeleteWaiting", "the group has members: deleted once it is empty", retry_after_s=RETRY_WAITING_S
            )
        return Outcome(False, "DeleteFailed", result.message, retry_after_s=RETRY_UNREACHABLE_S)

    async def _describe(self, group_id: str) -> GroupDescription | None:
        try:
            return await self.groups.describe_group(group_id)
        except TidelogError as error:
            if error.code == ErrorCode.GROUP_ID_NOT_FOUND:
                return None
            raise

    async def _reset_offsets(self, reset: ResetSpec, described: GroupDescription | None) -> dict[TopicPartition, int]:
        if reset.to == "offset":
            return {TopicPartition(topic, partition): offset for topic, partition, offset in reset.offsets}
        topics = list(reset.topics) or sorted(
            {lag.partition.topic for lag in (described.partitions if described else [])}
        )
        if not topics:
            raise error_for(ErrorCode.INVALID_REQUEST, "nothing to reset: name `topics` (the group has no offsets)")
        partitions: list[TopicPartition] = []
        for topic, found in (await self.admin.describe_topics(topics)).items():
            if not isinstance(found, TopicDescription):
                raise found
            partitions += [TopicPartition(topic, state.partition) for state in found.partitions]
        at = {"earliest": EARLIEST, "latest": LATEST}.get(
            reset.to, reset.timestamp if reset.timestamp is not None else LATEST
        )
        offsets = await self.groups.consumer.list_offsets(partitions, at)
        if reset.to == "timestamp":  # no record at or after the time: the end, as Kafka's tool does
            ends = await self.groups.consumer.list_offsets([tp for tp, o in offsets.items() if o < 0], LATEST)
            offsets.update(ends)
        return offsets


def _status(group_id: str, described: GroupDescription | None, last_reset: str | None) -> dict[str, Any]:
    if described is None:
        return {
            "groupId": group_id,
            "state": "Dead",
            "memberCount": 0,
            "members": [],
            "offsets": [],
            "totalLag": 0,
            **({"lastReset": last_reset} if last_reset else {}),
        }
    by_topic: dict[str, int] = collections.Counter()
    offsets = []
    for lag in described.partitions:
        entry: dict[str, Any] = {
            "topic": lag.partition.topic,
            "partition": lag.partition.partition,
            "end": lag.end_offset,
        }
        if lag.committed is not None:
            entry["committed"] = lag.committed
        if lag.lag is not None:
            entry["lag"] = lag.lag
            by_topic[lag.partition.topic] += lag.lag
        offsets.append(entry)
    return {
        "groupId": group_id,
        "state": described.state,
        "generation": described.generation_id,
        "protocol": described.protocol,
        "memberCount": len(described.members),
        "members": [
            {
                "memberId": member.member_id,
                "clientId": member.client_id,
                "groupInstanceId": member.group_instance_id,
                "partitions": [str(tp) for tp in member.partitions],
            }
            for member in described.members
        ],
        "offsets": offsets,
        "lagByTopic": dict(by_topic),
        "totalLag": sum(by_topic.values()),
        **({"lastReset": last_reset} if last_reset else {}),
    }
