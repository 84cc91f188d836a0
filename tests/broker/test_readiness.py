"""A broker's readiness for a rolling restart: no partition it hosts under-replicated among the
registered brokers, kept as a file Kubernetes' probe reads."""

from __future__ import annotations

from pathlib import Path

from tidelog.broker.metadata_cache import MetadataCache
from tidelog.broker.readiness import Readiness, under_replicated_hosted
from tidelog.v1 import broker_pb2, common_pb2


def _push(metadata: MetadataCache, live: list[int], states: list[tuple[int, list[int], list[int]]]) -> None:
    """The controller's UpdateMetadata: live brokers and (partition, replicas, isr) of topic "t"."""
    metadata.update(
        broker_pb2.UpdateMetadataRequest(
            controller_id=1,
            controller_epoch=1,
            live_brokers=[common_pb2.BrokerEndpoint(broker_id=broker, host="h", port=broker) for broker in live],
            partitions=[
                common_pb2.PartitionState(topic="t", partition=p, leader=isr[0], replicas=replicas, isr=isr)
                for p, replicas, isr in states
            ],
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
