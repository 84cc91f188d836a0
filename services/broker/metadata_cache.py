"""The cluster metadata a broker serves to clients, as the controller last sent it (UpdateMetadata)."""

from __future__ import annotations

import json

from tidelog.common.errors import ErrorCode
from tidelog.v1 import broker_pb2, common_pb2

__all__ = ["MetadataCache"]


class MetadataCache:
    def __init__(self) -> None:
        self.controller_id = -1
        self.controller_epoch = -1
        self.controller_endpoint = ""
        self.brokers: list[common_pb2.BrokerEndpoint] = []
        self.topics: dict[str, list[common_pb2.PartitionState]] = {}
        self.configs: dict[str, dict[str, str]] = {}

    def update(self, request: broker_pb2.UpdateMetadataRequest) -> None:
        if request.controller_epoch < self.controller_epoch:
            return
        self.controller_id = request.controller_id
        self.controller_epoch = request.controller_epoch
        self.controller_endpoint = request.controller_endpoint
        self.brokers = list(request.live_brokers)
        topics: dict[str, list[common_pb2.PartitionState]] = {}
        for state in request.partitions:
            topics.setdefault(state.topic, []).append(state)
        self.topics = {name: sorted(states, key=lambda state: state.partition) for name, states in topics.items()}
        self.configs = {name: json.loads(value) for name, value in request.topic_configs_json.items()}

    @property
    def initialised(self) -> bool:
        """Whether a controller has sent this broker the cluster's state since it started."""
        return self.controller_epoch >= 0

    def leader_of(self, topic: str, partition: int) -> int:
        for state in self.topics.get(topic, ()):
            if state.partition == partition:
                return state.leader
        return -1

    def describe(self, topics: list[str]) -> broker_pb2.MetadataResponse:
        response = broker_pb2.MetadataResponse(
            brokers=self.brokers, controller_id=self.controller_id, controller_endpoint=self.controller_endpoint
        )
        for name in topics or sorted(self.topics):
            if name not in self.topics:
                response.topics.add(name=name, error_code=int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
                continue
            response.topics.add(name=name, partitions=self.topics[name], configs=self.configs.get(name, {}))
        return response
