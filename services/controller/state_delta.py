"""What one broker was last told, and the requests that bring it up to date (delta pushes).

Kafka's controller sends a broker the partitions that changed, not the whole cluster: at 10,000
partitions a whole state is a megabyte per broker per request, and an ISR change of one partition
would resend all of it. So each push carries only the partitions whose state or topic record
changed since the push the broker acknowledged last (`BrokerView`); a partition's version is the
etcd mod revision of its state and of its topic record, which every committed change moves.

A broker with no view gets the whole state (full LeaderAndIsr, whole UpdateMetadata): the first
push of a controller term, a broker that registered (again), and one a push did not reach (its
view is dropped: what it holds is unknown). Whole states stay correct on their own, so a delta is
only ever an optimisation of one.
"""

from __future__ import annotations

import dataclasses
import json

from tidelog.controller.cluster_state import ClusterState
from tidelog.v1 import broker_pb2, common_pb2

__all__ = ["BrokerView", "StatePush", "build_push"]

PartitionKey = tuple[str, int]
Version = tuple[int, int]  # (mod revision of the partition's state or -1 before it has one, of its topic record)


@dataclasses.dataclass(slots=True)
class BrokerView:
    """What one life of a broker acknowledged: every partition's version, topic ids, its replicas."""

    incarnation: str
    versions: dict[PartitionKey, Version]
    topic_ids: dict[str, str]
    mine: set[PartitionKey]
    live_brokers: tuple[tuple[int, str, int, str, str], ...]  # as it was told (always sent whole)


@dataclasses.dataclass(slots=True)
class StatePush:
    leader_and_isr: broker_pb2.LeaderAndIsrRequest
    update_metadata: broker_pb2.UpdateMetadataRequest
    view: BrokerView  # the broker's view once it acknowledged both
    brokers_changed: bool

    @property
    def empty(self) -> bool:
        """Nothing changed for this broker: neither request needs to travel."""
        leader_and_isr, update = self.leader_and_isr, self.update_metadata
        return (
            not leader_and_isr.full
            and not self.brokers_changed
            and not leader_and_isr.partitions
            and not leader_and_isr.unassigned
            and not update.partitions
            and not update.deleted_topics
        )


def versions_of(state: ClusterState) -> dict[PartitionKey, Version]:
    versions: dict[PartitionKey, Version] = {}
    for name in sorted(state.topics):
        topic = state.topics[name]
        for partition in sorted(int(number) for number in topic.value.assignment):
            held = state.partitions.get((name, partition))
            versions[(name, partition)] = (held.mod_revision if held is not None else -1, topic.mod_revision)
    return versions


def build_push(
    state: ClusterState,
    *,
    broker_id: int,
    controller_id: int,
    controller_epoch: int,
    controller_endpoint: str,
    view: BrokerView | None,
    live_brokers: list[common_pb2.BrokerEndpoint] | None = None,
) -> StatePush:
    """The requests for `broker_id` as of `state` now: whole without a `view` of the same life,
    else only what changed since it."""
    broker = state.brokers[broker_id]
    versions = versions_of(state)
    full = view is None or view.incarnation != broker.incarnation
    if full or view is None:
        changed = list(versions)
        deleted_topics: list[str] = []
        kept_mine: set[PartitionKey] = set()
    else:
        changed = [key for key, version in versions.items() if view.versions.get(key) != version]
        deleted_topics = sorted(
            name
            for name, topic_id in view.topic_ids.items()
            if name not in state.topics or state.topics[name].value.topic_id != topic_id
        )
        changed_set = set(changed)
        kept_mine = {key for key in view.mine if key in versions and key not in changed_set}
    protos = [state.partition_proto(*key) for key in changed]
    configs = {
        name: json.dumps(state.topics[name].value.configs) for name in dict.fromkeys(proto.topic for proto in protos)
    }
    mine_protos = [proto for proto in protos if broker_id in proto.replicas]
    mine = kept_mine | {(proto.topic, proto.partition) for proto in mine_protos}
    unassigned = []
    if view is not None and not full:
        for key in sorted(view.mine - mine):
            unassigned.append(
                common_pb2.PartitionState(topic=key[0], partition=key[1], topic_id=view.topic_ids.get(key[0], ""))
            )
    live = live_brokers if live_brokers is not None else state.broker_protos()
    live_key = tuple((b.broker_id, b.host, b.port, b.rack, b.incarnation) for b in live)
    update = broker_pb2.UpdateMetadataRequest(
        controller_id=controller_id,
        controller_epoch=controller_epoch,
        controller_endpoint=controller_endpoint,
        live_brokers=live,
        partitions=protos,
        topic_configs_json=configs,
        incremental=not full,
        deleted_topics=deleted_topics,
    )
    leader_and_isr = broker_pb2.LeaderAndIsrRequest(
        controller_id=controller_id,
        controller_epoch=controller_epoch,
        partitions=mine_protos,
        topic_configs_json={name: configs[name] for name in dict.fromkeys(proto.topic for proto in mine_protos)},
        live_leaders=live,
        full=full,
        broker_incarnation=broker.incarnation,
        unassigned=unassigned,
    )
    topic_ids = {name: topic.value.topic_id for name, topic in state.topics.items()}
    view_after = BrokerView(broker.incarnation, versions, topic_ids, mine, live_key)
    return StatePush(leader_and_isr, update, view_after, view is None or view.live_brokers != live_key)
