"""DescribeClientQuotas and AlterClientQuotas on the Kafka listener, forwarded to the active
controller (quotas live in etcd, docs/security.md). DescribeClientQuotas' filter (KIP-546) is
applied here to every entity the controller lists."""

from __future__ import annotations

from typing import Any, Final

from tidelog.broker.kafka_api.admin_apis import AdminApis
from tidelog.broker.kafka_api.api_table import ApiKey
from tidelog.broker.kafka_api.request_context import KafkaRequestContext
from tidelog.common.errors import ErrorCode
from tidelog.v1 import controller_pb2

__all__ = ["HANDLED", "QuotaApis"]

Message = dict[str, Any]
EXACT, DEFAULT, SPECIFIED = 0, 1, 2  # DescribeClientQuotas' MatchType


def _entity(parts: list[Message]) -> list[controller_pb2.QuotaEntityPart]:
    return [
        controller_pb2.QuotaEntityPart(
            entity_type=part["EntityType"], name=part["EntityName"] or "", is_default=part["EntityName"] is None
        )
        for part in parts
    ]


def _kafka_entity(parts: Any) -> list[Message]:
    return [{"EntityType": part.entity_type, "EntityName": None if part.is_default else part.name} for part in parts]


def _matches(entity: list[Message], components: list[Message], strict: bool) -> bool:
    by_type = {part["EntityType"]: part["EntityName"] for part in entity}
    for component in components:
        kind, match_type = component["EntityType"], component["MatchType"]
        if kind not in by_type:
            return False
        name = by_type[kind]
        if match_type == EXACT and name != component["Match"]:
            return False
        if match_type == DEFAULT and name is not None:
            return False
        if match_type == SPECIFIED and name is None:
            return False
    return not strict or set(by_type) == {component["EntityType"] for component in components}


class QuotaApis:
    def __init__(self, admin: AdminApis) -> None:
        self.admin = admin

    async def describe_client_quotas(self, request: Message, version: int, context: KafkaRequestContext) -> Message:
        answer = await self.admin.controller_call(
            "DescribeClientQuotas", controller_pb2.DescribeClientQuotasRequest(), context
        )
        if answer is None:
            code = int(ErrorCode.NOT_CONTROLLER)
            return {"ThrottleTimeMs": 0, "ErrorCode": code, "ErrorMessage": "no controller", "Entries": None}
        entries = []
        for entry in answer.entries:
            entity = _kafka_entity(entry.entity)
            if _matches(entity, request["Components"], request["Strict"]):
                values = [{"Key": key, "Value": value} for key, value in sorted(entry.values.items())]
                entries.append({"Entity": entity, "Values": values})
        return {
            "ThrottleTimeMs": 0,
            "ErrorCode": answer.error_code,
            "ErrorMessage": answer.error_message or None,
            "Entries": entries,
        }

    async def alter_client_quotas(self, request: Message, version: int, context: KafkaRequestContext) -> Message:
        results = []
        for entry in request["Entries"]:
            if request["ValidateOnly"]:
                code, message = int(ErrorCode.INVALID_REQUEST), "validate-only is not served for quotas"
            else:
                alteration = controller_pb2.QuotaAlteration(
                    entity=_entity(entry["Entity"]),
                    ops=[
                        controller_pb2.QuotaValue(key=op["Key"], value=op["Value"], remove=op["Remove"])
                        for op in entry["Ops"]
                    ],
                )
                answer = await self.admin.controller_call(
                    "AlterClientQuotas", controller_pb2.AlterClientQuotasRequest(entries=[alteration]), context
                )
                code = int(ErrorCode.NOT_CONTROLLER) if answer is None else answer.error_code
                message = "no controller" if answer is None else answer.error_message
            results.append({"ErrorCode": code, "ErrorMessage": message or None, "Entity": entry["Entity"]})
        return {"ThrottleTimeMs": 0, "Entries": results}


HANDLED: Final = {
    ApiKey.DESCRIBE_CLIENT_QUOTAS: "describe_client_quotas",
    ApiKey.ALTER_CLIENT_QUOTAS: "alter_client_quotas",
}
