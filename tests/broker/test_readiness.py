"""A broker's readiness for a rolling restart: no partition it hosts under-replicated among the
registered brokers, kept as a file Kubernetes' probe reads."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from tidelog.broker.metadata_cache import MetadataCache
from tidelog.broker.readiness import Readiness, awaits_hand_back, under_replicated_hosted
from tidelog.controller.leader_balance import imbalanced_partitions
from tidelog.server_common.metadata import PartitionStateRecord
from tidelog.v1 import broker_pb2, common_pb2

State = tuple[int, list[int], list[int]]  # partition, replicas, isr (its first replica leads)


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
    assert not readiness.check() and not file.exists()  # no state from a controller yet
    _push(metadata, [1, 2, 3], [(0, [1, 2, 3], [1, 2])])
    assert not readiness.check() and not file.exists()
    _push(metadata, [1, 2, 3], [(0, [1, 2, 3], [1, 2, 3])])
    assert readiness.check() and file.exists()
    _push(metadata, [1, 2, 3], [(0, [1, 2, 3], [1, 3])])
    assert not readiness.check() and not file.exists()
    _push(metadata, [1, 2, 3], [(0, [1, 2, 3], [1, 2, 3])])
    assert readiness.check()
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
    assert awaits_hand_back(1, metadata) and not readiness.check()
    _push(metadata, [1, 2, 3], in_sync, REBALANCE, leaders={0: 1})
    assert readiness.check()
    # The rebalance off, or a controller that does not say: under-replication alone decides.
    _push(metadata, [1, 2, 3], in_sync, broker_pb2.LeaderBalance(auto_leader_rebalance_enable=False))
    assert readiness.check()
    _push(metadata, [1, 2, 3], in_sync)
    assert readiness.check()


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
