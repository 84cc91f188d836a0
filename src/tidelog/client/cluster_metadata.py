"""The client's view of the cluster: brokers, partition leaders, the controller's endpoint.

Refreshed from any reachable broker (bootstrap list first, then known brokers) with a Metadata
request; refreshed again whenever a request meets NOT_LEADER_OR_FOLLOWER or an unknown partition.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Final, NamedTuple

import grpc

from tidelog.client.connections import Connections
from tidelog.common.errors import (
    ErrorCode,
    LeaderNotAvailableError,
    TopicAuthorizationFailedError,
    UnknownTopicOrPartitionError,
)
from tidelog.v1 import broker_pb2, common_pb2

__all__ = ["ClusterMetadata", "TopicPartition"]

METADATA_STAGGER_S: Final = 0.5  # ask the next broker too after this long without an answer


class TopicPartition(NamedTuple):
    """A partition of a topic. A named tuple, as kafka-python's: hashing and comparing it is the C
    tuple's, which a consumer of 10,000 partitions does a million times a second (a frozen
    dataclass's generated __hash__ was a fifth of its CPU)."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


class ClusterMetadata:
    def __init__(self, bootstrap: Sequence[str], connections: Connections, *, request_timeout_s: float = 30.0) -> None:
        if not bootstrap:
            raise ValueError("at least one bootstrap broker endpoint is needed")
        self.bootstrap = list(bootstrap)
        self.connections = connections
        self.request_timeout_s = request_timeout_s
        self.brokers: dict[int, str] = {}
        self.partitions: dict[str, list[common_pb2.PartitionState]] = {}
        self.topic_errors: dict[str, int] = {}
        self.configs: dict[str, dict[str, str]] = {}
        self.controller_endpoint = ""
        self._refreshing: asyncio.Lock | None = None

    async def refresh(self, topics: Sequence[str] = ()) -> broker_pb2.MetadataResponse:
        """Ask brokers until one answers; raises if none does.

        Staggered (as "happy eyeballs"): the next broker is asked too when one has not answered
        within METADATA_STAGGER_S, so a stalled broker (alive but not answering) costs half a
        second, not a whole request timeout. The first answer wins.
        """
        if self._refreshing is None:
            self._refreshing = asyncio.Lock()
        async with self._refreshing:
            endpoints = list(dict.fromkeys([*self.bootstrap, *self.brokers.values()]))
            request = broker_pb2.MetadataRequest(topics=list(topics))
            asks: set[asyncio.Task[broker_pb2.MetadataResponse]] = set()
            last_error: BaseException | None = None
            try:
                while endpoints or asks:
                    if endpoints:
                        stub = self.connections.broker(endpoints.pop(0))
                        asks.add(asyncio.ensure_future(stub.Metadata(request, timeout=self.request_timeout_s)))
                    done, asks = await asyncio.wait(
                        asks, timeout=METADATA_STAGGER_S if endpoints else None, return_when=asyncio.FIRST_COMPLETED
                    )
                    for task in done:
                        error = task.exception()
                        if error is None:
                            response = task.result()
                            self._apply(response, topics)
                            return response
                        if not isinstance(error, grpc.aio.AioRpcError):
                            raise error
                        last_error = error
            finally:
                for task in asks:
                    task.cancel()
            said = (
                f"{last_error.code().name}: {last_error.details()}"
                if isinstance(last_error, grpc.aio.AioRpcError)
                else str(last_error)
            )
            raise ConnectionError(f"no broker answered a metadata request (asked {', '.join(self.bootstrap)}): {said}")

    def _apply(self, response: broker_pb2.MetadataResponse, topics: Sequence[str]) -> None:
        self.brokers = {broker.broker_id: f"{broker.host}:{broker.port}" for broker in response.brokers}
        self.controller_endpoint = response.controller_endpoint
        if not topics:
            self.partitions.clear()
        for topic in response.topics:
            if topic.error_code:
                self.topic_errors[topic.name] = topic.error_code
                self.partitions.pop(topic.name, None)
            else:
                self.topic_errors.pop(topic.name, None)
                self.partitions[topic.name] = _newest(
                    self.partitions.get(topic.name, []), sorted(topic.partitions, key=lambda state: state.partition)
                )
                self.configs[topic.name] = dict(topic.configs)

    async def partitions_of(self, topic: str) -> list[common_pb2.PartitionState]:
        if topic not in self.partitions:
            await self.refresh([topic])
        if topic not in self.partitions:
            code = self.topic_errors.get(topic, int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
            if code == ErrorCode.TOPIC_AUTHORIZATION_FAILED:
                raise TopicAuthorizationFailedError(f"not authorised to describe topic {topic!r}")
            raise UnknownTopicOrPartitionError(f"topic {topic!r} does not exist")
        return self.partitions[topic]

    def learn_leader(self, topic: str, partition: int, leader: int, leader_epoch: int) -> bool:
        """A broker's NOT_LEADER_OR_FOLLOWER named the leader it knows (KIP-951): take it without
        a metadata round trip if its epoch is newer than ours and it is a broker we can reach.
        True if taken. Epochs only go up, so hints can never send us round in a circle."""
        states = self.partitions.get(topic)
        if leader < 0 or states is None or partition >= len(states) or leader not in self.brokers:
            return False
        state = states[partition]
        if leader_epoch <= state.leader_epoch:
            return False
        state.leader, state.leader_epoch = leader, leader_epoch
        return True

    def leader_endpoint(self, topic: str, partition: int) -> str:
        """Endpoint of the partition's leader; LeaderNotAvailableError when there is none known."""
        states = self.partitions.get(topic)
        if states is None or partition >= len(states):
            raise UnknownTopicOrPartitionError(f"{topic}-{partition} is not known")
        leader = states[partition].leader
        endpoint = self.brokers.get(leader)
        if endpoint is None:
            raise LeaderNotAvailableError(f"{topic}-{partition} has no live leader (leader {leader})")
        return endpoint


def _newest(
    held: list[common_pb2.PartitionState], answered: list[common_pb2.PartitionState]
) -> list[common_pb2.PartitionState]:
    """The answer's states, except where we hold a newer leader epoch of the same topic (a hint
    taken since, or a broker answering that is behind): Kafka's client ignores stale metadata too."""
    for index, state in enumerate(answered):
        if index < len(held):
            mine = held[index]
            if (
                mine.topic_id == state.topic_id
                and mine.partition == state.partition
                and mine.leader_epoch > state.leader_epoch
            ):
                answered[index] = mine
    return answered
