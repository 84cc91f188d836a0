"""Consumer groups against a real cluster with two coordinator instances: one cluster for the
module, each test with its own topics and groups (a cluster's start is seconds of the suite, issue
37); the test that kills a coordinator has a cluster of its own."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from tidelog.client import AdminClient, GroupConsumer, Producer, TopicPartition
from tidelog.common.errors import TidelogError
from tidelog.dev.local_cluster import LocalCluster

from .conftest import COORDINATOR_ARGS, running_cluster, started_cluster, wait_until


@pytest.fixture(scope="module")
def group_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    folder = tmp_path_factory.mktemp("groups")
    with running_cluster(folder, coordinators=2, coordinator_args=COORDINATOR_ARGS) as cluster:
        yield cluster


@pytest.fixture
async def own_group_cluster(tmp_path: Path) -> AsyncIterator[LocalCluster]:
    async with started_cluster(tmp_path / "cluster", coordinators=2, coordinator_args=COORDINATOR_ARGS) as cluster:
        yield cluster


def _consumer(cluster: LocalCluster, group: str, **options: object) -> GroupConsumer:
    options.setdefault("auto_offset_reset", "earliest")
    options.setdefault("session_timeout_ms", 6000)
    options.setdefault("heartbeat_interval_ms", 200)
    return GroupConsumer(cluster.bootstrap, group, **options)  # type: ignore[arg-type]


async def test_members_share_partitions_and_commits_survive_a_coordinator_kill(
    own_group_cluster: LocalCluster,
) -> None:
    cluster = own_group_cluster
    async with AdminClient(cluster.bootstrap, controllers=cluster.controller_endpoints) as admin:
        await admin.create_topic("events", 6, 3)
    async with Producer(cluster.bootstrap) as producer:
        await (await producer.send_batch("events", [b"%04d" % n for n in range(600)]))
    first = _consumer(cluster, "readers", enable_auto_commit=False)
    second = _consumer(cluster, "readers", enable_auto_commit=False)
    first.subscribe(["events"])
    second.subscribe(["events"])
    seen: list[bytes] = []

    async def drain(consumer: GroupConsumer) -> None:
        seen.extend(record.value or b"" for record in await consumer.poll(200))

    async def both_assigned() -> bool:
        await asyncio.gather(drain(first), drain(second))
        owned = [first.assignment(), second.assignment()]
        return all(len(partitions) == 3 for partitions in owned) and not owned[0] & owned[1]

    await wait_until(both_assigned, timeout_s=60, what="two members with three partitions each")
    # Before the group settled a member may have read a partition the other then got and read again
    # from the start (nothing was committed: at-least-once, as Kafka's): count from the settled split.
    seen.clear()
    for member in (first, second):
        for partition in member.assignment():
            member.seek(partition, 0)

    async def everything() -> bool:
        await asyncio.gather(drain(first), drain(second))
        return len(seen) >= 600

    await wait_until(everything, timeout_s=60, what="all 600 records")
    assert sorted(seen) == [b"%04d" % n for n in range(600)]
    await first.commit()
    await second.commit()
    committed = await first.committed([TopicPartition("events", p) for p in range(6)])
    assert sum(offset or 0 for offset in committed.values()) == 600

    # kill -9 the coordinator instance serving the group: the other takes over, offsets intact.
    await first.link.stub()  # which coordinator instance serves the group
    serving = first.link.endpoint
    victim = next(
        f"coordinator-{i}" for i in cluster.coordinator_ids if cluster.coordinator_endpoints[i - 1] == serving
    )
    cluster.signal(victim, signal.SIGKILL)

    async def offsets_back() -> bool:
        try:
            again = await second.committed([TopicPartition("events", p) for p in range(6)])
        except Exception:
            return False
        return sum(offset or 0 for offset in again.values()) == 600

    await wait_until(offsets_back, timeout_s=60, what="another coordinator with the committed offsets")
    await first.close()
    await second.close()


async def test_a_member_that_leaves_hands_its_partitions_over(group_cluster: LocalCluster) -> None:
    cluster = group_cluster
    async with AdminClient(cluster.bootstrap, controllers=cluster.controller_endpoints) as admin:
        await admin.create_topic("handoff", 4, 2)
    staying = _consumer(cluster, "pair", partition_assignment_strategy=["cooperative-sticky"])
    leaving = _consumer(cluster, "pair", partition_assignment_strategy=["cooperative-sticky"])
    staying.subscribe(["handoff"])
    leaving.subscribe(["handoff"])

    async def split() -> bool:
        await asyncio.gather(staying.poll(100), leaving.poll(100))
        return len(staying.assignment()) == 2 and len(leaving.assignment()) == 2

    await wait_until(split, timeout_s=60, what="two members with two partitions each")
    before = set(staying.assignment())
    await leaving.close()

    async def all_to_one() -> bool:
        await staying.poll(100)
        return len(staying.assignment()) == 4

    await wait_until(all_to_one, timeout_s=30, what="the remaining member to own every partition")
    assert before <= staying.assignment()  # sticky: it kept what it had
    await staying.close()


async def test_a_static_member_back_within_its_session_gets_its_partitions_without_a_rebalance(
    group_cluster: LocalCluster,
) -> None:
    cluster = group_cluster
    async with AdminClient(cluster.bootstrap, controllers=cluster.controller_endpoints) as admin:
        await admin.create_topic("static", 4, 2)
    members = [
        _consumer(cluster, "statics", group_instance_id=f"worker-{n}", session_timeout_ms=20_000) for n in (1, 2)
    ]
    for member in members:
        member.subscribe(["static"])

    async def settled() -> bool:
        await asyncio.gather(*(member.poll(100) for member in members))
        return all(len(member.assignment()) == 2 for member in members)

    await wait_until(settled, timeout_s=60, what="two static members with two partitions each")
    before, generation = members[1].assignment(), members[1].generation_id
    await members[1].close()  # a static member does not leave: its place is kept for the session
    replacement = _consumer(cluster, "statics", group_instance_id="worker-2", session_timeout_ms=20_000)
    replacement.subscribe(["static"])

    async def back() -> bool:
        await asyncio.gather(members[0].poll(100), replacement.poll(100))
        return replacement.assignment() == before

    await wait_until(back, timeout_s=30, what="the restarted static member to get its partitions back")
    assert replacement.generation_id == generation  # no rebalance happened
    await members[0].close()
    await replacement.close()


async def test_a_member_that_stops_heartbeating_is_dropped_after_its_session(group_cluster: LocalCluster) -> None:
    cluster = group_cluster
    async with AdminClient(cluster.bootstrap, controllers=cluster.controller_endpoints) as admin:
        await admin.create_topic("silent", 2, 2)
    alive = _consumer(cluster, "silence", session_timeout_ms=2000)
    dying = _consumer(cluster, "silence", session_timeout_ms=2000)
    alive.subscribe(["silent"])
    dying.subscribe(["silent"])

    async def split() -> bool:
        await asyncio.gather(alive.poll(100), dying.poll(100))
        return len(alive.assignment()) == 1 and len(dying.assignment()) == 1

    await wait_until(split, timeout_s=60, what="one partition each")
    # As a process killed with -9: no LeaveGroup, no more heartbeats.
    assert dying._heartbeat_task is not None
    dying._heartbeat_task.cancel()

    async def taken_over() -> bool:
        await alive.poll(100)
        return len(alive.assignment()) == 2

    await wait_until(taken_over, timeout_s=30, what="the silent member's partition to move after its session")
    await alive.close()
    dying.membership.close()
    await dying.consumer.close()
    await dying.connections.close()


def _silence(member: GroupConsumer) -> None:
    """As a process killed with -9: no LeaveGroup, no heartbeats, no more polls."""
    assert member._heartbeat_task is not None
    member._heartbeat_task.cancel()
    member.membership.close()


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
async def test_churn_keeps_one_owner_per_partition_and_commit_after_process_loses_nothing(
    group_cluster: LocalCluster, strategy: str
) -> None:
    """Members join, leave and die while records keep arriving; each processes, then commits.

    Every record produced is processed at least once, and within one generation no partition
    belongs to two members."""
    cluster = group_cluster
    topic = f"churn-{strategy}"
    async with AdminClient(cluster.bootstrap, controllers=cluster.controller_endpoints) as admin:
        await admin.create_topic(topic, 6, 2)
    processed: list[bytes] = []
    owners: dict[tuple[int, TopicPartition], set[str]] = {}
    members: list[GroupConsumer] = []
    silenced: list[GroupConsumer] = []

    def join() -> GroupConsumer:
        member = _consumer(
            cluster,
            f"churners-{strategy}",
            enable_auto_commit=False,
            session_timeout_ms=2000,
            partition_assignment_strategy=[strategy],
            max_poll_records=50,
        )
        member.subscribe([topic])
        members.append(member)
        return member

    async def step(member: GroupConsumer) -> None:
        records = await member.poll(100)
        for tp in member.assignment():
            owners.setdefault((member.generation_id, tp), set()).add(member.member_id)
        processed.extend(record.value or b"" for record in records)  # "process" ...
        if records:
            with contextlib.suppress(TidelogError):  # ... then commit; a refused commit means redelivery
                await member.commit()

    produced = [b"%05d" % n for n in range(3000)]

    async def produce() -> None:
        async with Producer(cluster.bootstrap, linger_ms=5) as producer:
            for start in range(0, len(produced), 100):
                await (await producer.send_batch(topic, produced[start : start + 100]))
                await asyncio.sleep(0.05)  # a trickle that spans the membership changes

    async def run_for(seconds: float) -> None:
        deadline = asyncio.get_running_loop().time() + seconds
        while asyncio.get_running_loop().time() < deadline:
            await asyncio.gather(*(step(member) for member in members if member not in silenced))

    producing = asyncio.create_task(produce())
    join(), join()
    await run_for(3)
    join()  # a third arrives
    await run_for(3)
    await members[0].close()  # one leaves politely
    silenced.append(members[0])
    join()
    await run_for(3)
    _silence(members[1])  # one dies without a word: its partitions move after its session
    silenced.append(members[1])
    await producing

    async def everything() -> bool:
        await run_for(0.5)
        return set(produced) <= set(processed)

    await wait_until(everything, timeout_s=60, what="every produced record processed")
    for (generation, tp), who in owners.items():
        assert len(who) == 1, f"{tp} owned by {sorted(who)} in generation {generation}"
    assert len(owners) > 6  # more than one generation was observed
    survivor = members[-1]

    async def all_committed() -> bool:
        # A commit refused by a rebalance leaves its records to the next owner, which processes and
        # commits them again: everything ends committed, not necessarily by the first owner.
        await run_for(0.2)
        committed = await survivor.committed([TopicPartition(topic, p) for p in range(6)])
        total = sum(offset or 0 for offset in committed.values())
        assert total <= len(produced)  # never beyond what exists
        return total == len(produced)

    await wait_until(all_committed, timeout_s=30, what="every processed record committed")
    for member in members:
        if member not in silenced:
            await member.close()
    await members[1].consumer.close()
    await members[1].connections.close()


class _Recorder:
    """A rebalance listener that writes down what it is told."""

    def __init__(self) -> None:
        self.revoked: set[TopicPartition] = set()
        self.assigned: set[TopicPartition] = set()
        self.lost: set[TopicPartition] = set()

    async def on_partitions_revoked(self, partitions: set[TopicPartition]) -> None:
        self.revoked |= partitions

    async def on_partitions_assigned(self, partitions: set[TopicPartition]) -> None:
        self.assigned |= partitions

    async def on_partitions_lost(self, partitions: set[TopicPartition]) -> None:
        self.lost |= partitions


@pytest.mark.parametrize(("strategy", "cooperative"), [("cooperative-sticky", True), ("range", False)])
async def test_a_join_revokes_only_what_moves_when_cooperative_and_everything_when_eager(
    group_cluster: LocalCluster, strategy: str, cooperative: bool
) -> None:
    """KIP-429 through real members: a third member joins two that own 3 partitions each."""
    cluster = group_cluster
    topic = f"moves-{strategy}"
    async with AdminClient(cluster.bootstrap, controllers=cluster.controller_endpoints) as admin:
        await admin.create_topic(topic, 6, 1)
    members: list[GroupConsumer] = []
    recorders: list[_Recorder] = []

    def join() -> None:
        member = _consumer(cluster, f"movers-{strategy}", partition_assignment_strategy=[strategy])
        recorders.append(_Recorder())
        member.subscribe([topic], listener=recorders[-1])
        members.append(member)

    def balanced(size: int) -> Callable[[], Awaitable[bool]]:
        async def check() -> bool:
            await asyncio.gather(*(member.poll(100) for member in members))
            owned = [member.assignment() for member in members]
            return (
                all(len(partitions) == 6 // size for partitions in owned)
                and len(set().union(*owned)) == 6
                and all(not member.membership.rejoin_needed for member in members)
                # the listener told too: a member's assignment shows before its callback has run
                # (it awaits the committed offsets in between)
                and all(recorder.assigned >= part for recorder, part in zip(recorders, owned, strict=True))
            )

        return check

    join(), join()
    await wait_until(balanced(2), timeout_s=60, what="two members with three partitions each")
    before = [member.assignment() for member in members]
    for recorder in recorders:
        recorder.revoked.clear()
    join()
    await wait_until(balanced(3), timeout_s=60, what="three members with two partitions each")
    for recorder, owned_before, member in zip(recorders, before, members, strict=False):
        moved = owned_before - member.assignment()
        if cooperative:
            assert len(moved) == 1  # sticky: each gave one partition to the newcomer and kept two
            assert recorder.revoked == moved  # only what moved was revoked; the rest kept being read
        else:
            assert recorder.revoked == owned_before  # eager: everything, then assigned again
        assert not recorder.lost
    assert recorders[2].assigned == members[2].assignment()
    for member in members:
        await member.close()


async def test_a_cooperative_member_keeps_reading_what_it_keeps_while_a_dead_members_session_runs_out(
    group_cluster: LocalCluster,
) -> None:
    """Issue 39 (KIP-429): `poll` returned [] for the whole rebalance, so a cooperative member
    stopped reading the partitions it kept, waiting out a dead member's session included."""
    cluster = group_cluster
    async with AdminClient(cluster.bootstrap, controllers=cluster.controller_endpoints) as admin:
        await admin.create_topic("kept", 4, 1)
    stop_feeding = asyncio.Event()

    async def feed() -> None:
        async with Producer(cluster.bootstrap, linger_ms=1) as producer:
            while not stop_feeding.is_set():
                for partition in range(4):
                    await producer.send("kept", b"x", partition=partition)
                await asyncio.sleep(0.02)

    feeding = asyncio.create_task(feed())
    options = {"partition_assignment_strategy": ["cooperative-sticky"], "session_timeout_ms": 3000}
    staying, dying = _consumer(cluster, "keepers", **options), _consumer(cluster, "keepers", **options)
    staying.subscribe(["kept"])
    dying.subscribe(["kept"])

    async def split() -> bool:
        await asyncio.gather(staying.poll(100), dying.poll(100))
        return len(staying.assignment()) == 2 and len(dying.assignment()) == 2

    await wait_until(split, timeout_s=60, what="two partitions each")
    kept = set(staying.assignment())
    _silence(dying)  # no LeaveGroup: the group waits out its session when the newcomer joins
    newcomer = _consumer(cluster, "keepers", **options)
    newcomer.subscribe(["kept"])
    last_seen: dict[TopicPartition, float] = {}
    gaps: list[float] = []
    loop = asyncio.get_running_loop()
    joined_at = loop.time()

    async def newcomer_polls() -> None:
        while not newcomer.assignment():
            await newcomer.poll(100)

    newcomer_task = asyncio.create_task(newcomer_polls())
    while not newcomer_task.done():
        for record in await staying.poll(100):
            tp = TopicPartition(record.topic, record.partition)
            if tp in kept and tp in staying.assignment():
                now = loop.time()
                if tp in last_seen:
                    gaps.append(now - last_seen[tp])
                last_seen[tp] = now
        assert loop.time() - joined_at < 60, "the rebalance did not end"
    await newcomer_task
    rebalance_s = loop.time() - joined_at
    stop_feeding.set()
    await feeding
    assert rebalance_s >= 2.0, rebalance_s  # it did wait out most of the dead member's 3 s session
    assert kept & staying.assignment(), "the staying member kept some of its partitions"
    print(f"kept-partition gap: max {max(gaps, default=0):.3f} s over a {rebalance_s:.2f} s rebalance")
    assert gaps and max(gaps) < 1.0, (max(gaps, default=None), rebalance_s)  # before: the whole rebalance
    await staying.close()
    await newcomer.close()
    await dying.consumer.close()
    await dying.connections.close()
