"""A follower's epoch query (OffsetsForLeaderEpoch) that reaches a new leader before the
controller's push does: held, briefly, until this broker hears of the epoch it names."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Final

from tidelog.broker.replica_manager import ReplicaManager
from tidelog.v1 import broker_pb2

__all__ = ["EPOCH_QUERY_WAIT_MAX_S", "until_any_epoch_known"]

# A follower's epoch query naming leader epochs this broker has yet to hear of waits this long at
# most for the LeaderAndIsr that brings one, then is refused as before.
EPOCH_QUERY_WAIT_MAX_S: Final = 0.5


async def until_any_epoch_known(replicas: ReplicaManager, queries: Sequence[broker_pb2.EpochQuery]) -> None:
    """A follower's epoch queries name leader epochs this broker has yet to hear of when the
    controller's push reaches the follower first (a leadership moved): wait, up to
    EPOCH_QUERY_WAIT_MAX_S, until it has heard of one of them. Refused at once, the follower
    asked again and again (thousands of partitions a round, 0.1 s each on both sides) while
    this broker applied its push, and the partitions it took first (those written to lately)
    waited for the next round."""
    partitions = replicas.partitions

    def unknown(query: broker_pb2.EpochQuery) -> bool:
        hosted = partitions.get((query.topic, query.partition))
        return query.current_leader_epoch >= 0 and (
            hosted is None or hosted.state.leader_epoch < query.current_leader_epoch
        )

    loop = asyncio.get_running_loop()
    deadline = loop.time() + EPOCH_QUERY_WAIT_MAX_S
    while queries and all(unknown(query) for query in queries) and not replicas.long_polls_ended.is_set():
        remaining = deadline - loop.time()
        if remaining <= 0:
            return
        await replicas.states.next_states(remaining)
