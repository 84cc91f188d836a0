"""Topic administration on the Kafka listener: CreateTopics, DeleteTopics and CreatePartitions go to
the active controller over gRPC (as a KRaft broker forwards them, KIP-590); DescribeConfigs is
answered from this broker's metadata and defaults.

Manual replica assignments (CreateTopics' and CreatePartitions' `Assignments`) are refused with
INVALID_REQUEST: the controller places replicas itself (docs/kafka-protocol.md).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

import grpc

from tidelog.broker.broker_service import BrokerService
from tidelog.broker.kafka_api.api_table import ApiKey
from tidelog.broker.kafka_api.request_context import KafkaRequestContext, on_behalf_of
from tidelog.common.channels import ChannelPool
from tidelog.common.config import LOG_CONFIGS, ConfigDef, ConfigValue
from tidelog.common.errors import ErrorCode
from tidelog.common.kafka_wire.message_codec import topic_uuid
from tidelog.v1 import broker_pb2, controller_pb2, controller_pb2_grpc

__all__ = ["HANDLED", "AdminApis"]

Message = dict[str, Any]
REQUEST_TIMEOUT_S: Final = 30.0
TOPIC_RESOURCE: Final = 2  # DescribeConfigs' ResourceType
BROKER_RESOURCE: Final = 4
DYNAMIC_TOPIC_CONFIG: Final = 1  # ConfigSource
STATIC_BROKER_CONFIG: Final = 4
DEFAULT_CONFIG: Final = 5
CONFIG_TYPES: Final = {"boolean": 1, "string": 2, "int": 3, "long": 5, "double": 6, "list": 7}  # Kafka's ConfigType


def _not_controller(answer: Any) -> bool:
    """The controller asked is not the active one (it says so per topic, or for the request)."""
    if any(result.error_code == ErrorCode.NOT_CONTROLLER for result in getattr(answer, "topics", ())):
        return True
    return int(getattr(answer, "error_code", 0)) == ErrorCode.NOT_CONTROLLER


def _text(value: ConfigValue) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple):
        return ",".join(value)
    return str(value)


class AdminApis:
    def __init__(self, service: BrokerService, channels: ChannelPool) -> None:
        self.service = service
        self.channels = channels

    async def controller_call(self, method: str, request: Any, context: KafkaRequestContext) -> Any:
        """The active controller's answer, following one NOT_CONTROLLER redirect; None when no
        controller could be reached (the caller answers NOT_CONTROLLER, which clients retry)."""
        endpoint = self.service.metadata.controller_endpoint
        for _ in range(2):
            if not endpoint:
                return None
            stub = controller_pb2_grpc.ControllerStub(self.channels.channel(endpoint))
            try:
                metadata = on_behalf_of(self.service.access, context)
                answer = await getattr(stub, method)(request, timeout=REQUEST_TIMEOUT_S, metadata=metadata)
            except grpc.aio.AioRpcError:
                return None
            if not _not_controller(answer):
                return answer
            endpoint = getattr(answer, "controller_endpoint", "") or self.service.metadata.controller_endpoint
        return None

    @staticmethod
    def _results(names: Iterable[str], answer: Any, refused: dict[str, tuple[int, str]]) -> dict[str, tuple[int, str]]:
        found = {result.name: (result.error_code, result.error_message) for result in answer.topics} if answer else {}
        unreachable = (int(ErrorCode.NOT_CONTROLLER), "no controller could be reached")
        return {name: refused.get(name) or found.get(name) or unreachable for name in names}

    async def create_topics(self, request: Message, version: int, context: KafkaRequestContext) -> Message:
        refused = {
            topic["Name"]: (int(ErrorCode.INVALID_REQUEST), "manual replica assignments are not served")
            for topic in request["Topics"]
            if topic["Assignments"]
        }
        wanted = [
            controller_pb2.NewTopic(
                name=topic["Name"],
                num_partitions=topic["NumPartitions"],
                replication_factor=topic["ReplicationFactor"],
                configs={config["Name"]: config["Value"] or "" for config in topic["Configs"]},
            )
            for topic in request["Topics"]
            if topic["Name"] not in refused
        ]
        answer = (
            await self.controller_call(
                "CreateTopics",
                controller_pb2.CreateTopicsRequest(topics=wanted, validate_only=request["ValidateOnly"]),
                context,
            )
            if wanted
            else None
        )
        results = self._results((topic["Name"] for topic in request["Topics"]), answer, refused)
        asked = {topic["Name"]: topic for topic in request["Topics"]}
        return {
            "ThrottleTimeMs": 0,
            "Topics": [
                {
                    "Name": name,
                    "TopicId": topic_uuid(""),
                    "ErrorCode": code,
                    "ErrorMessage": message or None,
                    "NumPartitions": asked[name]["NumPartitions"] if not code else -1,
                    "ReplicationFactor": asked[name]["ReplicationFactor"] if not code else -1,
                    "Configs": None,
                }
                for name, (code, message) in results.items()
            ],
        }

    async def delete_topics(self, request: Message, version: int, context: KafkaRequestContext) -> Message:
        names: list[str | None] = (
            request["TopicNames"] if version < 6 else [topic["Name"] for topic in request["Topics"]]
        )
        by_id = sum(1 for name in names if name is None)  # v6+: a topic named only by its id
        named = [name for name in names if name is not None]
        answer = (
            await self.controller_call("DeleteTopics", controller_pb2.DeleteTopicsRequest(names=named), context)
            if named
            else None
        )
        results = self._results(named, answer, {})
        return {
            "ThrottleTimeMs": 0,
            "Responses": [
                {"Name": name, "ErrorCode": code, "ErrorMessage": message or None}
                for name, (code, message) in results.items()
            ]
            + [
                {
                    "Name": None,
                    "ErrorCode": int(ErrorCode.UNKNOWN_TOPIC_ID),
                    "ErrorMessage": "topics are deleted by name",
                }
            ]
            * by_id,
        }

    async def create_partitions(self, request: Message, version: int, context: KafkaRequestContext) -> Message:
        refused = {
            topic["Name"]: (int(ErrorCode.INVALID_REQUEST), "manual replica assignments are not served")
            for topic in request["Topics"]
            if topic["Assignments"]
        }
        if request["ValidateOnly"]:
            refused.update(
                {
                    topic["Name"]: (int(ErrorCode.INVALID_REQUEST), "validate-only is not served for CreatePartitions")
                    for topic in request["Topics"]
                }
            )
        wanted = [
            controller_pb2.PartitionIncrease(topic=topic["Name"], total_count=topic["Count"])
            for topic in request["Topics"]
            if topic["Name"] not in refused
        ]
        answer = (
            await self.controller_call(
                "CreatePartitions", controller_pb2.CreatePartitionsRequest(topics=wanted), context
            )
            if wanted
            else None
        )
        results = self._results((topic["Name"] for topic in request["Topics"]), answer, refused)
        return {
            "ThrottleTimeMs": 0,
            "Results": [
                {"Name": name, "ErrorCode": code, "ErrorMessage": message or None}
                for name, (code, message) in results.items()
            ],
        }

    async def describe_configs(self, request: Message, version: int, context: KafkaRequestContext) -> Message:
        results = []
        for resource in request["Resources"]:
            kind, name, keys = resource["ResourceType"], resource["ResourceName"], resource["ConfigurationKeys"]
            if kind == TOPIC_RESOURCE:
                # (through Metadata: the same authorisation, Describe on the topic)
                found = await self.service.Metadata(broker_pb2.MetadataRequest(topics=[name]), context)
                topic = found.topics[0]
                if topic.error_code:
                    results.append(self._described(kind, name, topic.error_code, f"topic {name!r}: no such topic"))
                    continue
                own = dict(topic.configs)
                defaults = self.service.replicas.states.log_defaults
                configs = [
                    self._entry(definition, own, defaults, version)
                    for definition in LOG_CONFIGS
                    if keys is None or definition.name in keys
                ]
                results.append(self._described(kind, name, 0, None, configs))
            elif kind == BROKER_RESOURCE and name in ("", str(self.service.replicas.broker_id)):
                settings = self.service.settings.as_configs()
                configs = [
                    {
                        "Name": key,
                        "Value": _text(value),
                        "ReadOnly": True,
                        "IsDefault": False,
                        "ConfigSource": STATIC_BROKER_CONFIG,
                        "IsSensitive": False,
                        "Synonyms": [],
                        "ConfigType": 0,
                        "Documentation": None,
                    }
                    for key, value in sorted(settings.items())
                    if keys is None or key in keys
                ]
                results.append(self._described(kind, name, 0, None, configs))
            else:
                code = int(ErrorCode.INVALID_REQUEST)
                results.append(self._described(kind, name, code, "only topics and this broker are described"))
        return {"ThrottleTimeMs": 0, "Results": results}

    async def alter_configs(self, request: Message, version: int, context: KafkaRequestContext) -> Message:
        """AlterConfigs: each topic's own configs become exactly those given."""
        return await self._alter(request, context, incremental=False)

    async def incremental_alter_configs(self, request: Message, version: int, context: KafkaRequestContext) -> Message:
        """IncrementalAlterConfigs: SET, DELETE, APPEND and SUBTRACT (list configs) per config."""
        return await self._alter(request, context, incremental=True)

    async def _alter(self, request: Message, context: KafkaRequestContext, *, incremental: bool) -> Message:
        responses = []
        for resource in request["Resources"]:
            kind, name = resource["ResourceType"], resource["ResourceName"]
            code, message = int(ErrorCode.NONE), ""
            if kind != TOPIC_RESOURCE:
                code, message = int(ErrorCode.INVALID_REQUEST), "only topics' configs change at run time"
            elif request["ValidateOnly"]:
                code, message = int(ErrorCode.INVALID_REQUEST), "validate-only is not served for config changes"
            else:
                own = dict(self.service.metadata.configs.get(name, {}))
                try:
                    change = _change(name, own, resource["Configs"], incremental)
                except ValueError as error:
                    code, message = int(ErrorCode.INVALID_CONFIG), str(error)
                else:
                    answer = await self.controller_call(
                        "AlterConfigs", controller_pb2.AlterConfigsRequest(changes=[change]), context
                    )
                    code, message = self._results([name], answer, {})[name]
            responses.append(
                {"ErrorCode": code, "ErrorMessage": message or None, "ResourceType": kind, "ResourceName": name}
            )
        return {"ThrottleTimeMs": 0, "Responses": responses}

    @staticmethod
    def _entry(definition: ConfigDef, own: dict[str, str], defaults: dict[str, str], version: int) -> Message:
        if definition.name in own:
            value, source = own[definition.name], DYNAMIC_TOPIC_CONFIG
        else:
            value = defaults.get(definition.name, _text(definition.default))
            source = STATIC_BROKER_CONFIG if definition.name in defaults else DEFAULT_CONFIG
        return {
            "Name": definition.name,
            "Value": value,
            "ReadOnly": False,
            "IsDefault": source == DEFAULT_CONFIG,
            "ConfigSource": source,
            "IsSensitive": False,
            "Synonyms": [],
            "ConfigType": CONFIG_TYPES.get(definition.type.value, 0),
            "Documentation": definition.doc,
        }

    @staticmethod
    def _described(
        kind: int, name: str, code: int, message: str | None, configs: list[Message] | None = None
    ) -> Message:
        return {
            "ErrorCode": code,
            "ErrorMessage": message,
            "ResourceType": kind,
            "ResourceName": name,
            "Configs": configs or [],
        }


SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3  # IncrementalAlterConfigs' ConfigOperation


def _change(topic: str, own: dict[str, str], configs: list[Message], incremental: bool) -> controller_pb2.ConfigChange:
    """The controller's change for a topic whose own configs are `own` (ValueError: one not served)."""
    if not incremental:  # the whole set: what is not given goes back to its default
        given = {config["Name"]: config["Value"] or "" for config in configs}
        return controller_pb2.ConfigChange(topic=topic, set=given, delete=[key for key in own if key not in given])
    wanted: dict[str, str] = {}
    deleted: list[str] = []
    defaults = {definition.name: _text(definition.default) for definition in LOG_CONFIGS}
    for config in configs:
        key, operation, value = config["Name"], config["ConfigOperation"], config["Value"] or ""
        current = [item for item in own.get(key, defaults.get(key, "")).split(",") if item]
        if operation == SET:
            wanted[key] = value
        elif operation == DELETE:
            deleted.append(key)
        elif operation == APPEND:
            wanted[key] = ",".join(current + [item for item in value.split(",") if item and item not in current])
        elif operation == SUBTRACT:
            wanted[key] = ",".join(item for item in current if item not in value.split(","))
        else:
            raise ValueError(f"{key}: config operation {operation}")
    return controller_pb2.ConfigChange(topic=topic, set=wanted, delete=deleted)


HANDLED: Final = {
    ApiKey.CREATE_TOPICS: "create_topics",
    ApiKey.DELETE_TOPICS: "delete_topics",
    ApiKey.CREATE_PARTITIONS: "create_partitions",
    ApiKey.DESCRIBE_CONFIGS: "describe_configs",
    ApiKey.ALTER_CONFIGS: "alter_configs",
    ApiKey.INCREMENTAL_ALTER_CONFIGS: "incremental_alter_configs",
}
