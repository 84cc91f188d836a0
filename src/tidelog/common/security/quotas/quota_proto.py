"""Quota entities to and from their protobuf parts (controller.proto), as acl_proto does for ACLs:
one definition for the controller, which checks them, and the client, which sends them."""

from __future__ import annotations

from collections.abc import Sequence

from tidelog.common.errors import InvalidRequestError
from tidelog.common.security.quotas.quota import DEFAULT, QuotaEntity
from tidelog.v1 import controller_pb2

__all__ = ["quota_entity_from_parts", "quota_entity_to_parts"]


def quota_entity_to_parts(entity: QuotaEntity) -> list[controller_pb2.QuotaEntityPart]:
    parts = []
    for entity_type, name in (("user", entity.user), ("client-id", entity.client_id)):
        if name is not None:
            parts.append(
                controller_pb2.QuotaEntityPart(
                    entity_type=entity_type, name="" if name == DEFAULT else name, is_default=name == DEFAULT
                )
            )
    return parts


def quota_entity_from_parts(parts: Sequence[controller_pb2.QuotaEntityPart]) -> QuotaEntity:
    """InvalidRequestError for an unknown or repeated type, or a part with neither name nor default."""
    names: dict[str, str] = {}
    for part in parts:
        if part.entity_type not in ("user", "client-id") or part.entity_type in names:
            raise InvalidRequestError(f"quota entity type {part.entity_type!r}: user or client-id, each at most once")
        if not part.is_default and not part.name:
            raise InvalidRequestError(f"quota entity {part.entity_type}: a name, or is_default")
        names[part.entity_type] = DEFAULT if part.is_default else part.name
    return QuotaEntity(names.get("user"), names.get("client-id"))
