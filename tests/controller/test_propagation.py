"""The controller's pushes, against a scripted broker: which brokers have applied a push since they
registered (the automatic leader rebalance hands leaderships only to those)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from tidelog.controller.controller_role import ControllerRole
from tidelog.controller.partition_leadership import PartitionLeadership
from tidelog.controller.propagation import Propagation
from tidelog.controller.state_delta import StatePush
from tidelog.server_common.metadata import BrokerRegistration, PartitionStateRecord

from .test_state_delta import Cluster


class ScriptedBroker:
    """BrokerRequests whose pushes wait until the test lets them through (or fail to reach)."""

    def __init__(self) -> None:
        self.pushes: list[tuple[int, bool]] = []  # (broker, whole)
        self.release = asyncio.Event()
        self.reached = True

    async def send_push(self, broker: BrokerRegistration, push: StatePush) -> set[tuple[str, int]] | None:
        self.pushes.append((broker.broker_id, push.leader_and_isr.full))
        await self.release.wait()
        return set() if self.reached else None


def _propagation(cluster: Cluster, broker: ScriptedBroker, applied: list[int]) -> Propagation:
    store: Any = SimpleNamespace(state=cluster.state)
    return Propagation(
        broker,  # type: ignore[arg-type]
        store,
        ControllerRole(1),
        controller_id=1,
        endpoint="127.0.0.1:1",
        on_first_push=applied.append,
    )


async def test_a_broker_counts_as_applied_once_its_first_push_is_answered_and_again_after_registering() -> None:
    cluster = Cluster()
    cluster.create("t", [[1, 2], [2, 1]])
    broker, applied = ScriptedBroker(), []
    propagation = _propagation(cluster, broker, applied)

    first = asyncio.create_task(propagation.propagate([1]))
    await asyncio.sleep(0.05)
    assert broker.pushes == [(1, True)]  # a whole push, under way
    assert not propagation.applied_since_registering(1)
    broker.release.set()
    await first
    assert propagation.applied_since_registering(1) and applied == [1]

    cluster.shrink("t", 0)
    await propagation.propagate([1])  # a delta: still applied, told no second time
    assert broker.pushes[-1] == (1, False) and applied == [1]

    propagation.forget(1)  # registered again (a new life)
    assert not propagation.applied_since_registering(1)
    broker.reached = False
    await propagation.propagate([1])  # not reached: applied nothing
    assert not propagation.applied_since_registering(1) and applied == [1]
    broker.reached = True
    await propagation.propagate([1])
    assert broker.pushes[-1] == (1, True)  # whole again
    assert propagation.applied_since_registering(1) and applied == [1, 1]


def test_the_rebalance_hands_leaderships_only_to_brokers_ready_to_lead() -> None:
    # Broker 1 is back in the ISRs of the partitions it prefers, its first push still applying:
    # leadership handed to it then waited for that push, its followers' epoch queries refused.
    cluster = Cluster()
    cluster.create("t", [[1, 2, 3], [2, 3, 1], [3, 1, 2], [1, 3, 2]])
    for partition in (0, 3):
        cluster.set_state("t", partition, PartitionStateRecord(2, [2, 3, 1], 1, 1, 1))
    store: Any = SimpleNamespace(state=cluster.state)
    leadership = PartitionLeadership(store, ControllerRole(1))
    assert leadership.rebalance(10, ready=lambda broker: broker != 1) == {}
    moved = leadership.rebalance(10, ready=lambda broker: True)
    assert sorted(moved) == [("t", 0), ("t", 3)] and {state.leader for state in moved.values()} == {1}
