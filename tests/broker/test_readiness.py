"""A broker's readiness for a rolling restart: no partition it hosts under-replicated among the
registered brokers, kept as a file Kubernetes' probe reads."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from structlog.testing import capture_logs

from tidelog.broker.metadata_cache import JOURNAL_UPDATES_MAX, MetadataCache
from tidelog.broker.readiness import Readiness, awaits_hand_back, under_replicated_hosted
from tidelog.controller.leader_balance import imbalanced_partitions
from tidelog.server_common import loop_slices
from tidelog.server_common.metadata import PartitionStateRecord
from tidelog.v1 import broker_pb2, common_pb2

State = tuple[int, list[int], list[int]]


def _ready(readiness: Readiness) -> bool:
    return asyncio.run(readiness.check())


# partition, replicas, isr (its first replica leads)


def _push(
    metadata: MetadataCache,
    live: list[int],
    states: list[State],
    balance: broker_pb2.LeaderBalance | None = None,
    leaders: dict[int, int] | None = None,
) -> None:
    """The controller's UpdateMetadata: live brokers and (partition, replicas, isr) of topic "t";
    a partition's leader is the first of its ISR unless `leaders` names another."""
    metadata.update(
        broker_pb2.UpdateMetadataRequest(
            controller_id=1,
            controller_epoch=1,
            live_brokers=[common_pb2.BrokerEndpoint(broker_id=broker, host="h", port=broker) for broker in live],
            partitions=[
                common_pb2.PartitionState(
                    topic="t", partition=p, leader=(leaders or {}).get(p, isr[0]), replicas=replicas, isr=isr
                )
                for p, replicas, isr in states
            ],
            leader_balance=balance,
        )
    )


def test_a_replica_missing_from_an_isr_makes_every_broker_hosting_it_unready() -> None:
    metadata = MetadataCache()
    _push(metadata, [1, 2, 3], [(0, [1, 2, 3], [1, 2]), (1, [1, 2], [1, 2])])
    assert under_replicated_hosted(1, metadata) == 1
    assert under_replicated_hosted(3, metadata) == 1  # the one catching up is not ready either
    _push(metadata, [1, 2, 3], [(0, [1, 2, 3], [1, 2, 3]), (1, [1, 2], [1, 2])])
    assert under_replicated_hosted(1, metadata) == 0


def test_a_replica_on_a_broker_that_is_not_registered_is_not_waited_for() -> None:
    # Broker 3 is gone for good: were it counted, no broker could ever be ready (nothing could roll).
    metadata = MetadataCache()
    _push(metadata, [1, 2], [(0, [1, 2, 3], [1, 2])])
    assert under_replicated_hosted(1, metadata) == 0
    _push(metadata, [1, 2], [(0, [1, 2, 3], [1])])
    assert under_replicated_hosted(1, metadata) == 1


def test_the_file_is_kept_exactly_while_ready(tmp_path: Path) -> None:
    file = tmp_path / "ready"
    metadata = MetadataCache()
    readiness = Readiness(3, metadata, file)
    assert not _ready(readiness) and not file.exists()  # no state from a controller yet
    _push(metadata, [1, 2, 3], [(0, [1, 2, 3], [1, 2])])
    assert not _ready(readiness) and not file.exists() and not readiness.in_sync
    _push(metadata, [1, 2, 3], [(0, [1, 2, 3], [1, 2, 3])])
    assert _ready(readiness) and file.exists() and readiness.in_sync
    _push(metadata, [1, 2, 3], [(0, [1, 2, 3], [1, 3])])
    assert not _ready(readiness) and not file.exists() and not readiness.in_sync
    _push(metadata, [1, 2, 3], [(0, [1, 2, 3], [1, 2, 3])])
    assert _ready(readiness)
    readiness.close()  # stopping: not ready for the next broker to restart
    assert not file.exists()


REBALANCE = broker_pb2.LeaderBalance(auto_leader_rebalance_enable=True, leader_imbalance_per_broker_percentage=10)


def test_with_the_rebalance_on_ready_waits_for_the_leaderships_handed_back(tmp_path: Path) -> None:
    # Broker 1 is back in every ISR but leads none of the partitions it prefers: the controller
    # is about to hand them back. The next broker stopping now would overlap the two moves.
    metadata = MetadataCache()
    readiness = Readiness(1, metadata, tmp_path / "ready")
    in_sync = [(0, [1, 2, 3], [2, 3, 1]), (1, [2, 3, 1], [2, 3, 1]), (2, [3, 1, 2], [3, 1, 2])]
    _push(metadata, [1, 2, 3], in_sync, REBALANCE)
    assert under_replicated_hosted(1, metadata) == 0
    assert awaits_hand_back(1, metadata) and not _ready(readiness)
    assert readiness.in_sync  # (its own moment, logged: a restart's catch-up is over)
    with capture_logs() as logged:
        _push(metadata, [1, 2, 3], [(0, [1, 2, 3], [2, 3]), *in_sync[1:]], REBALANCE)
        _ready(readiness)
        _push(metadata, [1, 2, 3], in_sync, REBALANCE)
        _ready(readiness)
    assert [entry["in_sync"] for entry in logged if entry["event"] == "broker_in_sync"] == [False, True]
    _push(metadata, [1, 2, 3], in_sync, REBALANCE, leaders={0: 1})
    assert _ready(readiness) and readiness.in_sync
    # The rebalance off, or a controller that does not say: under-replication alone decides.
    _push(metadata, [1, 2, 3], in_sync, broker_pb2.LeaderBalance(auto_leader_rebalance_enable=False))
    assert _ready(readiness)
    _push(metadata, [1, 2, 3], in_sync)
    assert _ready(readiness)


def test_a_share_within_the_imbalance_percentage_is_not_waited_for() -> None:
    # 1 of the 20 partitions broker 1 prefers is led elsewhere: 5%, within the 10% allowed,
    # so the controller leaves it, and waiting for it would stall the roll for good.
    metadata = MetadataCache()
    states = [(p, [1, 2], [1, 2]) for p in range(20)]
    _push(metadata, [1, 2], states, REBALANCE, leaders={0: 2})
    assert not awaits_hand_back(1, metadata)
    _push(metadata, [1, 2], states, REBALANCE, leaders={0: 2, 1: 2, 2: 2})
    assert awaits_hand_back(1, metadata)


@given(
    st.lists(
        st.tuples(st.permutations([1, 2, 3]), st.sets(st.sampled_from([1, 2, 3]), min_size=1), st.integers(0, 2)),
        min_size=1,
        max_size=12,
    ),
    st.integers(0, 100),
)
def test_the_broker_waits_exactly_when_the_controller_would_move_leaderships_to_it(
    partitions: list[tuple[list[int], set[int], int]], percentage: int
) -> None:
    # The controller's rule (leader_balance.imbalanced_partitions) and the broker's copy agree.
    states, leaders, assignments, records = [], {}, {}, {}
    for p, (replicas, isr_set, leader_index) in enumerate(partitions):
        isr = sorted(isr_set)
        leader = isr[leader_index % len(isr)]
        states.append((p, list(replicas), isr))
        leaders[p] = leader
        assignments[("t", p)] = list(replicas)
        records[("t", p)] = PartitionStateRecord(
            leader=leader, isr=isr, leader_epoch=0, partition_epoch=0, controller_epoch=1
        )
    metadata = MetadataCache()
    balance = broker_pb2.LeaderBalance(
        auto_leader_rebalance_enable=True, leader_imbalance_per_broker_percentage=percentage
    )
    _push(metadata, [1, 2, 3], states, balance, leaders)
    moves = imbalanced_partitions(assignments, records, {1, 2, 3}, percentage)
    for broker in (1, 2, 3):
        moved_to_it = any(assignments[key][0] == broker for key in moves)
        assert awaits_hand_back(broker, metadata) == moved_to_it


_replicas = st.permutations([1, 2, 3, 4]).map(lambda brokers: brokers[:3])
_isr_mask = st.integers(1, 7)  # which of the replicas are in the ISR (a bit mask)
_update = st.fixed_dictionaries(
    {
        "whole": st.booleans(),
        "live": st.sets(st.integers(1, 4), min_size=1).map(sorted),
        # a delta: partitions changed (topic, index into the topic's partitions, replicas, ISR) ...
        "changes": st.lists(
            st.tuples(st.sampled_from(["t", "u"]), st.integers(0, 9), _replicas, _isr_mask), max_size=6
        ),
        # ... topics created (whole, partitions 0..n-1 as the controller sends them) or deleted
        "created": st.lists(
            st.tuples(st.sampled_from(["t", "u"]), st.lists(st.tuples(_replicas, _isr_mask), min_size=1, max_size=4)),
            max_size=1,
        ),
        "deleted": st.lists(st.sampled_from(["t", "u"]), max_size=1),
        "rebalance": st.booleans(),
    }
)


def _state(topic: str, partition: int, replicas: list[int], mask: int) -> common_pb2.PartitionState:
    isr = [replica for bit, replica in enumerate(replicas) if mask >> bit & 1] or replicas[:1]
    return common_pb2.PartitionState(topic=topic, partition=partition, leader=isr[-1], replicas=replicas, isr=isr)


@given(st.lists(_update, min_size=1, max_size=12))
def test_counting_only_what_each_update_changed_agrees_with_counting_everything(updates: list[dict]) -> None:
    # A broker of 10,000 partitions recounts only what an update changed; whatever the updates
    # (deltas, whole states, topics created and deleted, brokers coming and going), it judges as a
    # count of everything does.
    metadata = MetadataCache()
    readiness = {broker: Readiness(broker, metadata, None) for broker in (1, 2, 3, 4)}
    topics: dict[str, list[common_pb2.PartitionState]] = {}  # the controller's view
    for update in updates:
        request = broker_pb2.UpdateMetadataRequest(
            controller_id=1,
            controller_epoch=1,
            incremental=not update["whole"],
            live_brokers=[
                common_pb2.BrokerEndpoint(broker_id=broker, host="h", port=broker) for broker in update["live"]
            ],
            leader_balance=broker_pb2.LeaderBalance(
                auto_leader_rebalance_enable=update["rebalance"], leader_imbalance_per_broker_percentage=10
            ),
        )
        sent: list[common_pb2.PartitionState] = []
        for topic in update["deleted"]:
            if topics.pop(topic, None) is not None:
                request.deleted_topics.append(topic)
        for topic, partitions in update["created"]:
            if topic not in topics:
                topics[topic] = [_state(topic, p, replicas, mask) for p, (replicas, mask) in enumerate(partitions)]
                sent += topics[topic]
        for topic, index, replicas, mask in update["changes"]:
            if topic in topics:
                partition = index % len(topics[topic])
                topics[topic][partition] = _state(topic, partition, replicas, mask)
                sent.append(topics[topic][partition])
        if update["whole"]:
            sent = [state for states in topics.values() for state in states]
        request.partitions.extend(sent)
        metadata.update(request)
        for broker, judged in readiness.items():
            assert _ready(judged) == (
                under_replicated_hosted(broker, metadata) == 0 and not awaits_hand_back(broker, metadata)
            ), (broker, update)


def test_a_reader_further_behind_than_the_cache_remembers_counts_everything_again() -> None:
    metadata = MetadataCache()
    _push(metadata, [1, 2, 3], [(0, [1, 2, 3], [1, 2, 3])])
    readiness = Readiness(3, metadata, None)
    assert _ready(readiness)
    seen = metadata.version
    assert metadata.changed_since(seen) == set()
    base = {"controller_id": 1, "controller_epoch": 1, "incremental": True, "live_brokers": metadata.brokers}
    for _ in range(JOURNAL_UPDATES_MAX):
        metadata.update(broker_pb2.UpdateMetadataRequest(**base))
    under = common_pb2.PartitionState(topic="t", partition=0, leader=1, replicas=[1, 2, 3], isr=[1, 2])
    metadata.update(broker_pb2.UpdateMetadataRequest(**base, partitions=[under]))
    assert metadata.changed_since(metadata.version - 1) == {("t", 0)}
    assert metadata.changed_since(seen) is None  # forgotten: everything may have changed
    assert not _ready(readiness)


async def test_a_whole_recount_lets_the_event_loop_go_and_an_update_meanwhile_is_counted_next(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # At 10,000 partitions a whole recount (the live brokers changed) held a broker's event loop
    # 0.1-0.2 s; now it yields between slices. An update taken during a yield is judged at the
    # next check, not lost.
    monkeypatch.setattr(loop_slices, "LOOP_SLICE_S", 0.0)  # a yield at every partition
    metadata = MetadataCache()
    in_sync = [(p, [1, 2, 3], [1, 2, 3]) for p in range(10_000)]
    _push(metadata, [1, 2, 3], in_sync)
    readiness = Readiness(3, metadata, None)
    turns = 0
    pushed = False

    async def meanwhile() -> None:
        nonlocal turns, pushed
        while True:
            turns += 1
            if turns == 5_000 and not pushed:  # halfway through: partition 0 loses broker 3
                metadata.update(
                    broker_pb2.UpdateMetadataRequest(
                        controller_id=1,
                        controller_epoch=1,
                        incremental=True,
                        live_brokers=metadata.brokers,
                        partitions=[
                            common_pb2.PartitionState(topic="t", partition=0, leader=1, replicas=[1, 2, 3], isr=[1, 2])
                        ],
                    )
                )
                pushed = True
            await asyncio.sleep(0)

    other = asyncio.create_task(meanwhile())
    await asyncio.sleep(0)
    assert await readiness.check()  # judged on the version it started from: all in sync
    assert turns >= 5_000 and pushed  # the other task ran all along the recount
    other.cancel()
    assert not await readiness.check()  # the update during it: partition 0 under-replicated now
