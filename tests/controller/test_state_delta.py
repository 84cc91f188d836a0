"""Delta pushes: a broker told only what changed ends up where a whole push would leave it."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidelog.broker.metadata_cache import MetadataCache
from tidelog.controller.cluster_state import ClusterState, Versioned
from tidelog.controller.state_delta import BrokerView, StatePush, WholeState, build_push
from tidelog.server_common.metadata import BrokerRegistration, PartitionStateRecord, TopicRecord
from tidelog.v1 import broker_pb2, common_pb2

ME = 1


class Cluster:
    """A controller's state changed the way the controller changes it: every write a new revision."""

    def __init__(self) -> None:
        self.state = ClusterState(
            brokers={b: BrokerRegistration(b, "127.0.0.1", 9000 + b, "", f"life-{b}") for b in (1, 2, 3)}
        )
        self.revisions = itertools.count(1)
        self.topic_ids = itertools.count(1)

    def create(self, name: str, assignment: list[list[int]]) -> None:
        record = TopicRecord(f"id-{next(self.topic_ids)}", {str(p): r for p, r in enumerate(assignment)}, {})
        self.state.topics[name] = Versioned(record, next(self.revisions))
        for partition, replicas in enumerate(assignment):
            self.set_state(name, partition, PartitionStateRecord(replicas[0], list(replicas), 0, 0, 1))

    def set_state(self, name: str, partition: int, record: PartitionStateRecord) -> None:
        self.state.partitions[(name, partition)] = Versioned(record, next(self.revisions))

    def shrink(self, name: str, partition: int) -> None:
        held = self.state.partitions[(name, partition)].value
        isr = held.isr[:1]
        self.set_state(
            name, partition, PartitionStateRecord(isr[0], isr, held.leader_epoch, held.partition_epoch + 1, 1)
        )

    def reassign(self, name: str, partition: int, replicas: list[int]) -> None:
        topic = self.state.topics[name].value
        assignment = {**topic.assignment, str(partition): replicas}
        self.state.topics[name] = Versioned(
            TopicRecord(topic.topic_id, assignment, topic.configs), next(self.revisions)
        )
        held = self.state.partitions[(name, partition)].value
        self.set_state(
            name,
            partition,
            PartitionStateRecord(replicas[0], replicas, held.leader_epoch + 1, held.partition_epoch + 1, 1),
        )

    def configure(self, name: str, value: str) -> None:
        topic = self.state.topics[name].value
        record = TopicRecord(topic.topic_id, topic.assignment, {"retention.ms": value})
        self.state.topics[name] = Versioned(record, next(self.revisions))

    def delete(self, name: str) -> None:
        topic = self.state.topics.pop(name).value
        for partition in range(topic.partition_count):
            self.state.partitions.pop((name, partition), None)

    def push(
        self,
        view: BrokerView | None,
        shutting_down: tuple[int, ...] = (),
        *,
        broker: int = ME,
        whole: WholeState | None = None,
    ) -> StatePush:
        return build_push(
            self.state,
            broker_id=broker,
            controller_id=100,
            controller_epoch=3,
            controller_endpoint="c:1",
            view=view,
            shutting_down=shutting_down,
            whole=whole,
        )


class Broker:
    """What a broker keeps of the pushes: its metadata cache and its replicas (by topic id)."""

    def __init__(self) -> None:
        self.metadata = MetadataCache()
        self.replicas: dict[tuple[str, int], str] = {}

    def apply(self, push: StatePush) -> None:
        request = push.leader_and_isr
        if request.full:
            self.replicas = {}
        for state in request.unassigned:
            if self.replicas.get((state.topic, state.partition)) == state.topic_id:
                del self.replicas[(state.topic, state.partition)]
        for state in request.partitions:
            self.replicas[(state.topic, state.partition)] = state.topic_id
        self.metadata.update(push.update_metadata)


def test_a_first_push_is_whole_and_an_unchanged_state_sends_nothing() -> None:
    cluster = Cluster()
    cluster.create("t", [[1, 2], [2, 3], [3, 1]])
    first = cluster.push(None)
    assert first.leader_and_isr.full and not first.update_metadata.incremental
    assert [(p.topic, p.partition) for p in first.leader_and_isr.partitions] == [("t", 0), ("t", 2)]
    assert len(first.update_metadata.partitions) == 3
    assert cluster.push(first.view).empty


def test_whole_pushes_share_the_partitions_until_the_state_changes_and_equal_those_built_alone() -> None:
    cluster = Cluster()
    cluster.create("t", [[1, 2], [2, 3], [3, 1]] * 10)
    cluster.create("u", [[2, 3]])

    first = cluster.push(None)
    assert first.whole is not None
    for broker in (2, 3):
        shared = cluster.push(None, broker=broker, whole=first.whole)
        assert shared.whole is first.whole
        alone = cluster.push(None, broker=broker)
        assert shared.leader_and_isr == alone.leader_and_isr and shared.update_metadata == alone.update_metadata
    cluster.shrink("t", 1)  # the journal moves: the next whole push is built anew, with the change
    after = cluster.push(None, broker=2, whole=first.whole)
    assert after.whole is not first.whole
    assert after.update_metadata == cluster.push(None, broker=2).update_metadata
    assert list(after.update_metadata.partitions[1].isr) == [2]
    # A delta uses none.
    assert cluster.push(first.view).whole is None


def test_a_delta_carries_only_the_changed_partition() -> None:
    cluster = Cluster()
    cluster.create("t", [[1, 2], [2, 3], [3, 1]] * 100)
    view = cluster.push(None).view
    cluster.shrink("t", 4)  # replicas [2, 3]: not ours
    delta = cluster.push(view)
    assert not delta.leader_and_isr.full and delta.update_metadata.incremental
    assert [(p.topic, p.partition) for p in delta.update_metadata.partitions] == [("t", 4)]
    assert list(delta.leader_and_isr.partitions) == []
    assert not delta.empty
    cluster.shrink("t", 3)  # replicas [1, 2]: ours
    assert [p.partition for p in cluster.push(delta.view).leader_and_isr.partitions] == [4 - 1]


def test_a_new_life_of_the_broker_or_a_new_broker_is_told_again() -> None:
    cluster = Cluster()
    cluster.create("t", [[1, 2]])
    view = cluster.push(None).view
    cluster.state.brokers[4] = BrokerRegistration(4, "127.0.0.1", 9004, "", "life-4")
    joined = cluster.push(view)
    assert not joined.empty and not joined.leader_and_isr.full
    assert [b.broker_id for b in joined.update_metadata.live_brokers] == [1, 2, 3, 4]
    cluster.state.brokers[ME] = BrokerRegistration(ME, "127.0.0.1", 9001, "", "life-1b")
    assert cluster.push(joined.view).leader_and_isr.full


def test_a_broker_entering_controlled_shutdown_is_told_to_every_broker_in_both_requests() -> None:
    # KIP-841: leaders must know it before they would ask to add it back to an ISR, and the
    # LeaderAndIsr that shrinks the ISRs arrives before the UpdateMetadata.
    cluster = Cluster()
    cluster.create("t", [[1, 2]])
    view = cluster.push(None).view
    stopping = cluster.push(view, shutting_down=(3,))
    assert not stopping.empty
    assert list(stopping.update_metadata.shutting_down_brokers) == [3]
    assert list(stopping.leader_and_isr.shutting_down_brokers) == [3]
    assert cluster.push(stopping.view, shutting_down=(3,)).empty  # told once
    broker = Broker()
    broker.apply(cluster.push(None, shutting_down=(3,)))
    assert not broker.metadata.isr_eligible(3, "life-3") and broker.metadata.isr_eligible(2, None)
    assert not cluster.push(stopping.view).empty  # and told when it is out of it


def test_a_replica_moved_away_is_named_unassigned_with_its_topic_id() -> None:
    cluster = Cluster()
    cluster.create("t", [[1, 2], [2, 3]])
    view = cluster.push(None).view
    cluster.reassign("t", 0, [2, 3])
    delta = cluster.push(view)
    assert [(p.topic, p.partition, p.topic_id) for p in delta.leader_and_isr.unassigned] == [("t", 0, "id-1")]


operations = st.lists(
    st.tuples(
        st.sampled_from(["create", "shrink", "reassign", "configure", "delete", "push", "lost_push"]),
        st.sampled_from(["a", "b"]),
        st.integers(0, 3),
        st.permutations([1, 2, 3]),
    ),
    max_size=25,
)


@settings(max_examples=150, deadline=None)
@given(operations)
def test_deltas_leave_a_broker_where_a_whole_push_would(steps: list[tuple[str, str, int, list[int]]]) -> None:
    cluster = Cluster()
    told = Broker()  # deltas after the first push
    view: BrokerView | None = None
    for action, name, partition, order in steps:
        exists = name in cluster.state.topics
        if action == "create" and not exists:
            cluster.create(name, [order[:2], order[1:], order[::2], order[:1]][: partition + 1])
        elif action == "delete" and exists:
            cluster.delete(name)
        elif exists and partition < cluster.state.topics[name].value.partition_count:
            if action == "shrink":
                cluster.shrink(name, partition)
            elif action == "reassign":
                cluster.reassign(name, partition, order[:2])
            elif action == "configure":
                cluster.configure(name, str(partition))
        if action == "lost_push":  # built, never acknowledged: the broker's view is unknown now
            cluster.push(view)
            view = None
        elif action == "push":
            push = cluster.push(view)
            told.apply(push)
            view = push.view
    final = cluster.push(view)
    told.apply(final)
    whole = Broker()
    whole_view = cluster.push(None).view
    whole.apply(cluster.push(None))
    assert told.replicas == whole.replicas
    assert told.metadata.describe([]) == whole.metadata.describe([])
    assert final.view.mine == cluster.push(None).view.mine and final.view.topic_ids == whole_view.topic_ids


def test_an_incremental_update_keeps_the_rest_of_the_cache() -> None:
    cache = MetadataCache()
    states = [common_pb2.PartitionState(topic="t", partition=p, leader=1, isr=[1], replicas=[1]) for p in range(3)]
    cache.update(
        broker_pb2.UpdateMetadataRequest(controller_epoch=1, partitions=states, topic_configs_json={"t": "{}"})
    )
    moved = common_pb2.PartitionState(topic="t", partition=1, leader=2, isr=[2], replicas=[1, 2])
    cache.update(broker_pb2.UpdateMetadataRequest(controller_epoch=1, partitions=[moved], incremental=True))
    assert [state.leader for p in range(3) if (state := cache.state_of("t", p)) is not None] == [1, 2, 1]
    cache.update(broker_pb2.UpdateMetadataRequest(controller_epoch=1, incremental=True, deleted_topics=["t"]))
    assert cache.state_of("t", 0) is None and "t" not in cache.configs


def test_partitions_a_broker_refused_are_sent_again() -> None:
    cluster = Cluster()
    cluster.create("t", [[1, 2], [1, 3]])
    view = cluster.push(None).view
    view.retry = {("t", 1)}
    again = cluster.push(view)
    assert [(p.topic, p.partition) for p in again.leader_and_isr.partitions] == [("t", 1)]
    assert cluster.push(again.view).empty


def test_the_journal_names_what_changed_after_a_position_and_refuses_blind_changes() -> None:
    state = ClusterState()
    record = PartitionStateRecord(1, [1], 0, 0, 1)
    state.partitions[("a", 0)] = Versioned(record, 1)
    seen = state.journal.seq
    state.partitions[("b", 0)] = Versioned(record, 2)
    state.partitions[("a", 0)] = Versioned(record, 3)
    assert sorted(state.journal.since(seen)[0]) == [("a", 0), ("b", 0)]
    assert state.journal.since(state.journal.seq) == ([], [])
    with pytest.raises(TypeError, match="key by key"):
        state.partitions.update({("c", 0): Versioned(record, 4)})


def test_a_new_term_s_state_makes_every_view_of_the_last_one_whole_again() -> None:
    # A controller term loads its state anew: a view acknowledged against another journal (another
    # term, here or in a controller deposed meanwhile) says nothing about what the broker holds.
    cluster = Cluster()
    cluster.create("t", [[1, 2]])
    view = cluster.push(None).view
    assert cluster.push(view).empty
    reloaded = ClusterState(
        brokers=dict(cluster.state.brokers),
        topics=dict(cluster.state.topics),
        partitions=dict(cluster.state.partitions),
    )
    cluster.state = reloaded
    assert cluster.push(view).leader_and_isr.full
