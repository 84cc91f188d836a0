"""ApiVersions, Metadata and DescribeCluster on the Kafka listener.

Metadata names every broker by its Kafka listener (a broker without one is left out of `Brokers`)
and reports this broker as the controller: Kafka clients send admin requests to the controller
they are told, and this broker serves them for the cluster (Tidelog's controller speaks only gRPC).
"""

from __future__ import annotations

from typing import Any, Final

from tidelog.broker.broker_service import BrokerService
from tidelog.broker.kafka_api.api_table import SUPPORTED, ApiKey
from tidelog.broker.kafka_api.request_context import KafkaRequestContext
from tidelog.broker.request_metrics import REQUESTS
from tidelog.common.errors import ErrorCode
from tidelog.common.kafka_wire.message_codec import topic_uuid
from tidelog.server_common.metadata import CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from tidelog.v1 import broker_pb2

__all__ = ["ClusterApis"]

Message = dict[str, Any]
INTERNAL_TOPICS: Final = frozenset({CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC})
AUTHORIZED_OPERATIONS_OMITTED: Final = -(2**31)  # Kafka's "not asked for"


def api_versions_body(error: ErrorCode = ErrorCode.NONE) -> Message:
    return {
        "ErrorCode": int(error),
        "ApiKeys": [
            {"ApiKey": int(key), "MinVersion": versions.low, "MaxVersion": versions.high}
            for key, versions in sorted(SUPPORTED.items())
        ],
        "ThrottleTimeMs": 0,
    }


class ClusterApis:
    def __init__(self, service: BrokerService, broker_id: int, cluster_id: str) -> None:
        self.service = service
        self.broker_id = broker_id
        self.cluster_id = cluster_id

    async def api_versions(self, request: Message, version: int, context: KafkaRequestContext) -> Message:
        REQUESTS.labels("ApiVersions", "NONE").inc()
        return api_versions_body()

    def _brokers(self) -> list[Message]:
        return [
            {
                "NodeId": broker.broker_id,
                "Host": broker.kafka_host,
                "Port": broker.kafka_port,
                "Rack": broker.rack or None,
            }
            for broker in self.service.metadata.brokers
            if broker.kafka_port > 0
        ]

    async def metadata(self, request: Message, version: int, context: KafkaRequestContext) -> Message:
        asked = request["Topics"]
        # v0: an empty list means every topic; v1+: null means every topic, empty means none.
        every = asked is None or (version == 0 and not asked)
        names = [] if every else [topic["Name"] for topic in asked if topic["Name"] is not None]
        if not every and not names:
            described = broker_pb2.MetadataResponse()
        else:
            described = await self.service.Metadata(broker_pb2.MetadataRequest(topics=names), context)
        live = {broker.broker_id for broker in self.service.metadata.brokers}
        topics = []
        for topic in described.topics:
            partitions = [
                {
                    "ErrorCode": int(ErrorCode.NONE if state.leader >= 0 else ErrorCode.LEADER_NOT_AVAILABLE),
                    "PartitionIndex": state.partition,
                    "LeaderId": state.leader,
                    "LeaderEpoch": state.leader_epoch,
                    "ReplicaNodes": list(state.replicas),
                    "IsrNodes": list(state.isr),
                    "OfflineReplicas": [replica for replica in state.replicas if replica not in live],
                }
                for state in topic.partitions
            ]
            topic_id = topic.partitions[0].topic_id if topic.partitions else ""
            topics.append(
                {
                    "ErrorCode": topic.error_code,
                    "Name": topic.name,
                    "TopicId": topic_uuid(topic_id),
                    "IsInternal": topic.name in INTERNAL_TOPICS,
                    "Partitions": partitions,
                    "TopicAuthorizedOperations": AUTHORIZED_OPERATIONS_OMITTED,
                }
            )
        return {
            "ThrottleTimeMs": 0,
            "Brokers": self._brokers(),
            "ClusterId": self.cluster_id,
            "ControllerId": self.broker_id,
            "Topics": topics,
            "ClusterAuthorizedOperations": AUTHORIZED_OPERATIONS_OMITTED,
        }

    async def describe_cluster(self, request: Message, version: int, context: KafkaRequestContext) -> Message:
        REQUESTS.labels("DescribeCluster", "NONE").inc()
        return {
            "ThrottleTimeMs": 0,
            "ErrorCode": 0,
            "ErrorMessage": None,
            "EndpointType": 1,  # brokers
            "ClusterId": self.cluster_id,
            "ControllerId": self.broker_id,
            "Brokers": [
                {"BrokerId": broker["NodeId"], "Host": broker["Host"], "Port": broker["Port"], "Rack": broker["Rack"]}
                for broker in self._brokers()
            ],
            "ClusterAuthorizedOperations": AUTHORIZED_OPERATIONS_OMITTED,
        }


HANDLED: Final = {
    ApiKey.API_VERSIONS: "api_versions",
    ApiKey.METADATA: "metadata",
    ApiKey.DESCRIBE_CLUSTER: "describe_cluster",
}
