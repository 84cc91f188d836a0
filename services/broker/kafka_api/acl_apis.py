"""DescribeAcls, CreateAcls and DeleteAcls on the Kafka listener, forwarded to the active
controller (it keeps the bindings in etcd); Kafka's numeric codes for resource types, pattern
types, operations and permissions map to the names Tidelog's ACLs use (common/security/
authorization/acl.py). A code with no name here (a delegation token, a user) is refused with
INVALID_REQUEST."""

from __future__ import annotations

from typing import Any, Final

from tidelog.broker.kafka_api.admin_apis import AdminApis
from tidelog.broker.kafka_api.api_table import ApiKey
from tidelog.broker.kafka_api.request_context import KafkaRequestContext
from tidelog.common.errors import ErrorCode
from tidelog.v1 import controller_pb2

__all__ = ["HANDLED", "AclApis"]

Message = dict[str, Any]
ANY: Final = 1  # Kafka's ANY in every filter enumeration
RESOURCE_TYPES: Final = {2: "Topic", 3: "Group", 4: "Cluster", 5: "TransactionalId"}
PATTERN_TYPES: Final = {3: "Literal", 4: "Prefixed", 2: "Match"}
OPERATIONS: Final = {
    2: "All",
    3: "Read",
    4: "Write",
    5: "Create",
    6: "Delete",
    7: "Alter",
    8: "Describe",
    9: "ClusterAction",
    10: "DescribeConfigs",
    11: "AlterConfigs",
    12: "IdempotentWrite",
}
PERMISSIONS: Final = {2: "Deny", 3: "Allow"}
LITERAL: Final = 3


def _code(table: dict[int, str], name: str) -> int:
    return next((code for code, known in table.items() if known == name), 0)


class _UnnamedCodeError(ValueError):
    pass


def _name(table: dict[int, str], code: int, *, filtering: bool) -> str:
    """A code's name; "" for ANY in a filter (matches anything); _UnnamedCodeError for a code not served."""
    if filtering and code == ANY:
        return ""
    if code not in table:
        raise _UnnamedCodeError(f"code {code}")
    return table[code]


def _filter(entry: Message, version: int) -> controller_pb2.AclFilter:
    return controller_pb2.AclFilter(
        resource_type=_name(RESOURCE_TYPES, entry["ResourceTypeFilter"], filtering=True),
        resource_name=entry["ResourceNameFilter"] or "",
        pattern_type=_name(PATTERN_TYPES, entry["PatternTypeFilter"] if version >= 1 else LITERAL, filtering=True),
        principal=entry["PrincipalFilter"] or "",
        host=entry["HostFilter"] or "",
        operation=_name(OPERATIONS, entry["Operation"], filtering=True),
        permission=_name(PERMISSIONS, entry["PermissionType"], filtering=True),
    )


def _binding_fields(binding: controller_pb2.AclBinding) -> Message:
    return {
        "ResourceType": _code(RESOURCE_TYPES, binding.resource_type),
        "ResourceName": binding.resource_name,
        "PatternType": _code(PATTERN_TYPES, binding.pattern_type),
        "Principal": binding.principal,
        "Host": binding.host,
        "Operation": _code(OPERATIONS, binding.operation),
        "PermissionType": _code(PERMISSIONS, binding.permission),
    }


class AclApis:
    def __init__(self, admin: AdminApis) -> None:
        self.admin = admin  # (its way to the active controller)

    async def describe_acls(self, request: Message, version: int, context: KafkaRequestContext) -> Message:
        try:
            wanted = controller_pb2.DescribeAclsRequest(filter=_filter(request, version))
        except _UnnamedCodeError as error:
            return {"ThrottleTimeMs": 0, "ErrorCode": int(ErrorCode.INVALID_REQUEST), "ErrorMessage": str(error)}
        answer = await self.admin.controller_call("DescribeAcls", wanted, context)
        if answer is None:
            return {"ThrottleTimeMs": 0, "ErrorCode": int(ErrorCode.NOT_CONTROLLER), "ErrorMessage": "no controller"}
        resources: dict[tuple[int, str, int], list[Message]] = {}
        for binding in answer.bindings:
            fields = _binding_fields(binding)
            key = (fields["ResourceType"], fields["ResourceName"], fields["PatternType"])
            resources.setdefault(key, []).append(
                {k: fields[k] for k in ("Principal", "Host", "Operation", "PermissionType")}
            )
        return {
            "ThrottleTimeMs": 0,
            "ErrorCode": answer.error_code,
            "ErrorMessage": answer.error_message or None,
            "Resources": [
                {"ResourceType": kind, "ResourceName": name, "PatternType": pattern, "Acls": acls}
                for (kind, name, pattern), acls in resources.items()
            ],
        }

    async def create_acls(self, request: Message, version: int, context: KafkaRequestContext) -> Message:
        results = []
        for creation in request["Creations"]:  # one call each: Kafka answers each creation apart
            try:
                binding = controller_pb2.AclBinding(
                    resource_type=_name(RESOURCE_TYPES, creation["ResourceType"], filtering=False),
                    resource_name=creation["ResourceName"],
                    pattern_type=_name(
                        PATTERN_TYPES, creation["ResourcePatternType"] if version >= 1 else LITERAL, filtering=False
                    ),
                    principal=creation["Principal"],
                    host=creation["Host"],
                    operation=_name(OPERATIONS, creation["Operation"], filtering=False),
                    permission=_name(PERMISSIONS, creation["PermissionType"], filtering=False),
                )
            except _UnnamedCodeError as error:
                results.append({"ErrorCode": int(ErrorCode.INVALID_REQUEST), "ErrorMessage": f"not served: {error}"})
                continue
            answer = await self.admin.controller_call(
                "CreateAcls", controller_pb2.CreateAclsRequest(creations=[binding]), context
            )
            code = int(ErrorCode.NOT_CONTROLLER) if answer is None else answer.error_code
            message = "no controller" if answer is None else answer.error_message
            results.append({"ErrorCode": code, "ErrorMessage": message or None})
        return {"ThrottleTimeMs": 0, "Results": results}

    async def delete_acls(self, request: Message, version: int, context: KafkaRequestContext) -> Message:
        results = []
        for entry in request["Filters"]:
            try:
                wanted = controller_pb2.DeleteAclsRequest(filters=[_filter(entry, version)])
            except _UnnamedCodeError as error:
                results.append(
                    {"ErrorCode": int(ErrorCode.INVALID_REQUEST), "ErrorMessage": str(error), "MatchingAcls": []}
                )
                continue
            answer = await self.admin.controller_call("DeleteAcls", wanted, context)
            if answer is None:
                results.append(
                    {"ErrorCode": int(ErrorCode.NOT_CONTROLLER), "ErrorMessage": "no controller", "MatchingAcls": []}
                )
                continue
            results.append(
                {
                    "ErrorCode": answer.error_code,
                    "ErrorMessage": answer.error_message or None,
                    "MatchingAcls": [
                        {"ErrorCode": 0, "ErrorMessage": None, **_binding_fields(binding)} for binding in answer.deleted
                    ],
                }
            )
        return {"ThrottleTimeMs": 0, "FilterResults": results}


HANDLED: Final = {
    ApiKey.DESCRIBE_ACLS: "describe_acls",
    ApiKey.CREATE_ACLS: "create_acls",
    ApiKey.DELETE_ACLS: "delete_acls",
}
