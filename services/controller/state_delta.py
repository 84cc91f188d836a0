"""What one broker was last told, and the requests that bring it up to date (delta pushes).

Kafka's controller sends a broker the partitions that changed, not the whole cluster: at 10,000
partitions a whole state is a megabyte per broker per request, and an ISR change of one partition
would resend all of it. So each push carries only the partitions whose state or topic record
changed since the push the broker acknowledged last (`BrokerView`), found in the cluster state's
journal (every change of a partition state or a topic record, in order) at the cost of the changes.

A broker with no view gets the whole state (full LeaderAndIsr, whole UpdateMetadata): the first
push of a controller term, a broker that registered (again), and one a push did not reach (its
view is dropped: what it holds is unknown). Whole states stay correct on their own, so a delta is
only ever an optimisation of one.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Collection

from tidelog.controller.cluster_state import ClusterState, Journal
from tidelog.v1 import broker_pb2, common_pb2

__all__ = ["BrokerView", "StatePush", "WholeState", "build_push", "whole_state"]

PartitionKey = tuple[str, int]


@dataclasses.dataclass(slots=True)
class BrokerView:
    """What one life of a broker acknowledged: the state up to a journal position, topic ids, its
    replicas (by topic), and partitions it refused (sent again)."""

    incarnation: str
    journal: Journal
    seq: int
    topic_ids: dict[str, str]
    mine: dict[str, set[int]]
    # as it was told (always sent whole): each live broker, then the ids in controlled shutdown
    live_brokers: tuple[object, ...]
    retry: set[PartitionKey] = dataclasses.field(default_factory=set)


@dataclasses.dataclass(slots=True)
class WholeState:
    """Every partition's state as of one journal position. The brokers told the whole state at
    that position share it: a new controller's first push builds 10,000 protos once, not once per
    broker (three times 0.07 s of the loop, during which no client learns of the new controller)."""

    journal: Journal
    seq: int
    keys: list[PartitionKey]
    protos: list[common_pb2.PartitionState]

    def current(self, state: ClusterState) -> bool:
        # Every change of a partition state or a topic record moves the journal (a partition goes
        # only with its topic), so an unmoved journal is an unchanged set of protos.
        return self.journal is state.journal and self.seq == state.journal.seq


def whole_state(state: ClusterState, last: WholeState | None = None) -> WholeState:
    """`last` when it is still current, else built anew."""
    if last is not None and last.current(state):
        return last
    keys = _all_partitions(state)
    return WholeState(state.journal, state.journal.seq, keys, [state.partition_proto(*key) for key in keys])


@dataclasses.dataclass(slots=True)
class StatePush:
    leader_and_isr: broker_pb2.LeaderAndIsrRequest
    update_metadata: broker_pb2.UpdateMetadataRequest
    view: BrokerView  # the broker's view once it acknowledged both
    brokers_changed: bool
    whole: WholeState | None = None  # what a whole push was built from (for the next broker's)

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


def _all_partitions(state: ClusterState) -> list[PartitionKey]:
    return [(name, partition) for name in sorted(state.topics) for partition in state.topic_partitions(name)]


def build_push(
    state: ClusterState,
    *,
    broker_id: int,
    controller_id: int,
    controller_epoch: int,
    controller_endpoint: str,
    view: BrokerView | None,
    leader_balance: broker_pb2.LeaderBalance | None = None,
    shutting_down: Collection[int] = (),
    whole: WholeState | None = None,
) -> StatePush:
    """The requests for `broker_id` as of `state` now: whole without a `view` of the same life
    (and the same journal: one controller term), else only what changed since it. The view is
    consumed: pass the one the broker acknowledged last, keep the returned one. A whole push uses
    `whole` when it is current (`StatePush.whole` is what it used)."""
    broker = state.brokers[broker_id]
    full = view is None or view.incarnation != broker.incarnation or view.journal is not state.journal
    unassigned: list[common_pb2.PartitionState] = []
    if full or view is None:
        whole = whole_state(state, whole)
        changed, protos = whole.keys, whole.protos
        deleted_topics: list[str] = []
        mine: dict[str, set[int]] = {}
    else:
        whole = None
        partitions, topics = state.journal.since(view.seq)
        candidates = set(partitions) | view.retry
        for name in topics:
            if name in state.topics:
                candidates.update((name, partition) for partition in range(state.topics[name].value.partition_count))
        changed = sorted(key for key in candidates if state.partition_exists(key))
        deleted_topics = sorted(
            name
            for name, topic_id in view.topic_ids.items()
            if name not in state.topics or state.topics[name].value.topic_id != topic_id
        )
        mine = view.mine
        for name in topics:  # a topic deleted (or created again) takes its partitions along
            if name not in state.topics or state.topics[name].value.topic_id != view.topic_ids.get(name):
                for partition in sorted(mine.pop(name, ())):
                    unassigned.append(
                        common_pb2.PartitionState(
                            topic=name, partition=partition, topic_id=view.topic_ids.get(name, "")
                        )
                    )
        protos = [state.partition_proto(*key) for key in changed]
    # Whose replica each is, from the topic records: a proto's fields cost an attribute access each.
    records = {name: state.topics[name].value for name in dict.fromkeys(name for name, _ in changed)}
    mine_protos = []
    mine_topics: dict[str, None] = {}
    for (name, partition), proto in zip(changed, protos, strict=True):
        held = mine.setdefault(name, set())
        if broker_id in records[name].replicas(partition):
            mine_protos.append(proto)
            mine_topics[name] = None
            held.add(partition)
        elif partition in held:  # moved away from this broker
            held.discard(partition)
            unassigned.append(
                common_pb2.PartitionState(topic=name, partition=partition, topic_id=records[name].topic_id)
            )
    configs = {name: json.dumps(record.configs) for name, record in records.items()}
    live = state.broker_protos()
    stopping = sorted(shutting_down)
    # (a broker entering controlled shutdown is news for every broker: a push, as a registration is)
    live_key = (
        *((b.broker_id, b.host, b.port, b.rack, b.incarnation, b.kafka_host, b.kafka_port) for b in live),
        tuple(stopping),
    )
    update = broker_pb2.UpdateMetadataRequest(
        controller_id=controller_id,
        controller_epoch=controller_epoch,
        controller_endpoint=controller_endpoint,
        live_brokers=live,
        partitions=protos,
        topic_configs_json=configs,
        incremental=not full,
        deleted_topics=deleted_topics,
        leader_balance=leader_balance,
        shutting_down_brokers=stopping,
    )
    leader_and_isr = broker_pb2.LeaderAndIsrRequest(
        controller_id=controller_id,
        controller_epoch=controller_epoch,
        partitions=mine_protos,
        topic_configs_json={name: configs[name] for name in mine_topics},
        live_leaders=live,
        full=full,
        broker_incarnation=broker.incarnation,
        unassigned=unassigned,
        shutting_down_brokers=stopping,
    )
    topic_ids = {name: topic.value.topic_id for name, topic in state.topics.items()}
    mine = {name: partitions for name, partitions in mine.items() if partitions}
    view_after = BrokerView(broker.incarnation, state.journal, state.journal.seq, topic_ids, mine, live_key)
    return StatePush(leader_and_isr, update, view_after, view is None or view.live_brokers != live_key, whole)
