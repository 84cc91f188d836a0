"""Consumer groups of Kafka's own clients through the Kafka listener, forwarded to Tidelog's group
coordinators: librdkafka, kafka-python and aiokafka members share one group's partitions and
commits; librdkafka's cooperative-sticky rebalances incrementally; groups are listed, described
and deleted with librdkafka's admin client."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer as RdConsumer
from confluent_kafka import Producer as RdProducer
from confluent_kafka.admin import AdminClient as RdAdmin
from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor

from tests.cluster import kafka_clients
from tests.cluster.conftest import COORDINATOR_ARGS, running_cluster
from tests.cluster.kafka_clients import GroupMember, committed_offsets, write_confluent
from tidelog.client.sync import SyncAdminClient
from tidelog.dev.local_cluster import LocalCluster

PARTITIONS = 6
PER_PARTITION = 10
SETTLE_S = 60.0
CLIENT_HUNG_S = 20.0  # one poll(200) of kafka-python this long is its hang (GroupMember.hung_for)


@pytest.fixture(scope="module")
def group_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    data = Path(tmp_path_factory.mktemp("kafka-groups"))
    with running_cluster(data, coordinators=1, coordinator_args=COORDINATOR_ARGS, gateways=1) as cluster:
        yield cluster


def _filled_topic(cluster: LocalCluster) -> str:
    topic = f"t-{uuid.uuid4().hex[:10]}"
    admin = SyncAdminClient(cluster.bootstrap)
    try:
        admin.create_topic(topic, num_partitions=PARTITIONS, replication_factor=3)
    finally:
        admin.close()
    for partition in range(PARTITIONS):
        records = [(None, f"{partition}-{number}".encode(), []) for number in range(PER_PARTITION)]
        write_confluent(cluster.kafka_bootstrap, topic, partition, records)
    return topic


def _settled(members: list[GroupMember], cluster: LocalCluster, group: str, topic: str) -> bool:
    """Every member holds some partitions, none twice, all of them; every offset committed."""
    held = [member.assignment for member in members]
    if not all(held) or sum(map(len, held)) != PARTITIONS or frozenset().union(*held) != set(range(PARTITIONS)):
        return False
    committed = committed_offsets(cluster.kafka_bootstrap, group, topic, PARTITIONS)
    return all(offset == PER_PARTITION for offset in committed.values())


class _ClientFaultError(Exception):
    """A known fault of kafka-python's, not the cluster's: a member hung inside poll()
    (GroupMember.hung_for), or a leader that assigned without the topic's metadata."""


class _AssignedBlind(logging.Handler):
    """Hears kafka-python's assignors say they assigned without a topic's partitions ("No partition
    metadata for topic ..."). Its leader then hands out none of them, and keeps that assignment:
    the group never settles (dpkp/kafka-python#2377, seen against Apache Kafka too; here in CI, one
    member holding all 6 partitions and the other none for 60 s). GroupMember now learns the topic's
    partitions before it subscribes, which keeps its leader from assigning blind; this stays to name
    the fault should it happen all the same."""

    def __init__(self, topic: str) -> None:
        super().__init__(logging.WARNING)
        self.topic = topic
        self.heard = False

    def emit(self, record: logging.LogRecord) -> None:
        self.heard |= "No partition metadata" in record.getMessage() and self.topic in record.getMessage()


def _run_group(cluster: LocalCluster, start: Callable[[str, str], list[GroupMember]]) -> None:
    """A group of the members `start(group, topic)` makes on a fresh filled topic, until it settles.
    Once, and only for a known kafka-python fault (`_ClientFaultError`), the whole run starts again
    with a new topic, group and members; a hung thread is left behind (a daemon)."""
    try:
        topic, group = _filled_topic(cluster), f"g-{uuid.uuid4().hex[:8]}"
        _run_group_once(cluster, start(group, topic), group, topic)
    except _ClientFaultError as fault:
        print(f"kafka-python's fault ({fault}); the run starts again once")
        topic, group = _filled_topic(cluster), f"g-{uuid.uuid4().hex[:8]}"
        _run_group_once(cluster, start(group, topic), group, topic)


def _run_group_once(cluster: LocalCluster, members: list[GroupMember], group: str, topic: str) -> None:
    assignors = logging.getLogger("kafka.coordinator.assignors")
    blind = _AssignedBlind(topic)
    assignors.addHandler(blind)
    for member in members:
        member.start()
    hung: list[GroupMember] = []
    try:
        deadline = time.monotonic() + SETTLE_S
        while not _settled(members, cluster, group, topic):
            for member in members:
                if member.failure is not None:  # its thread ended: it will never settle
                    raise AssertionError(f"a {member.library} member failed") from member.failure
            hung = [member for member in members if member.hung_for() > CLIENT_HUNG_S]
            if hung:
                raise _ClientFaultError(f"poll() of a {hung[0].library} member running for {hung[0].hung_for():.0f} s")
            unsettled = [(member.library, member.assignment, len(member.values)) for member in members]
            if time.monotonic() >= deadline and blind.heard:
                raise _ClientFaultError(f"a leader assigned without {topic}'s metadata: {unsettled}")
            assert time.monotonic() < deadline, unsettled
            time.sleep(0.2)
    finally:
        assignors.removeHandler(blind)
        for member in members:
            if member not in hung:
                member.close()
            else:
                member.stop.set()
    read = set().union(*(member.values for member in members))
    assert read == {f"{p}-{n}".encode() for p in range(PARTITIONS) for n in range(PER_PARTITION)}


def test_members_of_three_libraries_share_one_groups_partitions_and_commits(group_cluster: LocalCluster) -> None:
    bootstrap = group_cluster.kafka_bootstrap

    def start(group: str, topic: str) -> list[GroupMember]:
        return [
            # Their assignors in common: roundrobin (aiokafka offers nothing else by default).
            GroupMember("confluent", bootstrap, group, topic, **{"partition.assignment.strategy": "roundrobin,range"}),
            GroupMember("kafka-python", bootstrap, group, topic),
            GroupMember("aiokafka", bootstrap, group, topic),
        ]

    _run_group(group_cluster, start)


def test_librdkafkas_cooperative_sticky_members_rebalance_and_the_group_is_listed_described_and_deleted(
    group_cluster: LocalCluster,
) -> None:
    topic, group = _filled_topic(group_cluster), f"g-{uuid.uuid4().hex[:8]}"
    bootstrap = group_cluster.kafka_bootstrap
    cooperative = {"partition.assignment.strategy": "cooperative-sticky", "session.timeout.ms": 6000}
    members = [GroupMember("confluent", bootstrap, group, topic, **cooperative) for _ in range(2)]
    _run_group_once(group_cluster, members, group, topic)
    admin = RdAdmin({"bootstrap.servers": bootstrap})
    listed = admin.list_consumer_groups().result(timeout=30)
    assert group in {entry.group_id for entry in listed.valid}
    described = admin.describe_consumer_groups([group])[group].result(timeout=30)
    assert described.group_id == group and not described.members  # both left
    admin.delete_consumer_groups([group])[group].result(timeout=30)
    assert group not in {entry.group_id for entry in admin.list_consumer_groups().result(timeout=30).valid}


def test_librdkafka_transactions_commit_abort_and_carry_a_groups_offsets(group_cluster: LocalCluster) -> None:
    """A transactional librdkafka producer (init, commit, abort, send_offsets_to_transaction) as a
    consume-transform-produce loop: read_committed readers see what was committed, never what was
    aborted; the group's offsets commit with the transaction."""
    source, group = _filled_topic(group_cluster), f"g-{uuid.uuid4().hex[:8]}"
    target = f"t-{uuid.uuid4().hex[:10]}"
    admin = SyncAdminClient(group_cluster.bootstrap)
    try:
        admin.create_topic(target, num_partitions=2, replication_factor=3)
    finally:
        admin.close()
    bootstrap = group_cluster.kafka_bootstrap
    producer = RdProducer({"bootstrap.servers": bootstrap, "transactional.id": f"tx-{uuid.uuid4().hex[:6]}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for number in range(5):
        producer.produce(target, b"aborted-%d" % number, partition=number % 2)
    assert producer.flush(30) == 0  # written, then aborted (abort alone drops what is still queued)
    producer.abort_transaction(30)
    consumer = RdConsumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    consumer.subscribe([source])
    moved = 0
    deadline = time.monotonic() + SETTLE_S
    while moved < PARTITIONS * PER_PARTITION:
        assert time.monotonic() < deadline, f"moved {moved}"
        messages = [m for m in consumer.consume(100, 1.0) if m.error() is None]
        if not messages:
            continue
        producer.begin_transaction()
        for message in messages:
            producer.produce(target, b"moved-" + message.value(), partition=message.partition() % 2)
        producer.send_offsets_to_transaction(
            consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), 30
        )
        producer.commit_transaction(30)
        moved += len(messages)
    consumer.close()
    committed = committed_offsets(bootstrap, group, source, PARTITIONS)
    assert all(offset == PER_PARTITION for offset in committed.values()), committed
    read = kafka_clients.read_confluent_from(bootstrap, target, 2, {"isolation.level": "read_committed"})
    assert sorted(read) == sorted(b"moved-%d-%d" % (p, n) for p in range(PARTITIONS) for n in range(PER_PARTITION))
    uncommitted = kafka_clients.read_confluent_from(bootstrap, target, 2, {"isolation.level": "read_uncommitted"})
    assert {value for value in uncommitted if value.startswith(b"aborted")} == {b"aborted-%d" % n for n in range(5)}


def test_what_librdkafka_writes_the_rest_gateway_reads_back_the_same(group_cluster: LocalCluster) -> None:
    """The REST side of the matrix (tests/cluster/test_kafka_clients.py has every Kafka client and
    the native one): keys, values, headers and offsets as librdkafka wrote them."""
    topic = _filled_topic(group_cluster)
    sent = kafka_clients.records_to_send("confluent", 8)
    write_confluent(group_cluster.kafka_bootstrap, topic, 0, sent, **{"enable.idempotence": True})
    read = kafka_clients.read_rest(group_cluster.gateway_urls[0], topic, {0: PER_PARTITION + len(sent)})[0]
    assert read[PER_PARTITION:] == [
        (PER_PARTITION + number, key, value, tuple(headers)) for number, (key, value, headers) in enumerate(sent)
    ]


@pytest.mark.parametrize(
    "members",
    [
        pytest.param([("confluent", {"partition.assignment.strategy": "range"})] * 2, id="librdkafka-range"),
        pytest.param(
            [("kafka-python", {"partition_assignment_strategy": [StickyPartitionAssignor]})] * 2,
            id="kafka-python-sticky",
            # Soak only: two kafka-python 3.0.12 members in one long-lived pytest process. In full
            # suites its I/O loop stalled 0.5 s at a time (27 "blocking the event loop" warnings in
            # 60 s), a member stopped heartbeating and was expired without learning it, and the
            # group never settled (CI twice, here once; never in 26 runs of this module alone).
            # kafka-python's groups stay in the default run with the other two cases.
            marks=pytest.mark.soak,
        ),
        pytest.param(
            [
                ("confluent", {"partition.assignment.strategy": "cooperative-sticky"}),
                ("kafka-python", {"partition_assignment_strategy": [CooperativeStickyAssignor]}),
            ],
            id="cooperative-sticky-across-libraries",
        ),
    ],
)
def test_each_assignor_shares_a_groups_partitions(
    group_cluster: LocalCluster, members: list[tuple[str, dict[str, object]]]
) -> None:
    bootstrap = group_cluster.kafka_bootstrap
    _run_group(
        group_cluster,
        lambda group, topic: [GroupMember(library, bootstrap, group, topic, **config) for library, config in members],
    )
