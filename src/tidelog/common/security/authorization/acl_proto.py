"""ACL bindings and filters to and from their protobuf messages (controller.proto)."""

from __future__ import annotations

from tidelog.common.security.authorization.acl import (
    AclBinding,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    enum_of,
)
from tidelog.v1 import controller_pb2

__all__ = ["acl_filter_from_proto", "acl_filter_to_proto", "acl_from_proto", "acl_to_proto"]


def acl_to_proto(binding: AclBinding) -> controller_pb2.AclBinding:
    return controller_pb2.AclBinding(
        principal=binding.principal,
        host=binding.host,
        operation=binding.operation.value,
        permission=binding.permission.value,
        resource_type=binding.resource_type.value,
        resource_name=binding.resource_name,
        pattern_type=binding.pattern_type.value,
    )


def acl_from_proto(message: controller_pb2.AclBinding) -> AclBinding:
    return AclBinding.of(
        principal=message.principal,
        host=message.host or "*",
        operation=message.operation,
        permission=message.permission or "Allow",
        resource_type=message.resource_type,
        resource_name=message.resource_name,
        pattern_type=message.pattern_type or "Literal",
    )


def acl_filter_to_proto(selected: AclFilter) -> controller_pb2.AclFilter:
    return controller_pb2.AclFilter(
        principal=selected.principal or "",
        host=selected.host or "",
        operation=selected.operation.value if selected.operation else "",
        permission=selected.permission.value if selected.permission else "",
        resource_type=selected.resource_type.value if selected.resource_type else "",
        resource_name=selected.resource_name or "",
        pattern_type=selected.pattern_type.value if selected.pattern_type else "",
    )


def acl_filter_from_proto(message: controller_pb2.AclFilter) -> AclFilter:
    return AclFilter(
        principal=message.principal or None,
        host=message.host or None,
        operation=enum_of(Operation, message.operation, "ACL operation") if message.operation else None,  # type: ignore[arg-type]
        permission=enum_of(Permission, message.permission, "ACL permission") if message.permission else None,  # type: ignore[arg-type]
        resource_type=(
            enum_of(ResourceType, message.resource_type, "ACL resource type") if message.resource_type else None  # type: ignore[arg-type]
        ),
        resource_name=message.resource_name or None,
        pattern_type=enum_of(PatternType, message.pattern_type, "ACL pattern type") if message.pattern_type else None,  # type: ignore[arg-type]
    )
