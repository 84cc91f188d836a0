"""Kafka's ACL model: bindings of (principal, host, operation, permission) to resource patterns, and
the decision a request gets (Kafka's AclAuthorizer / StandardAuthorizer rules).

A request is allowed when the principal is a super user, or no Deny binding matches and some Allow
binding does. "Matches": the binding's principal is the caller or `User:*`, its host the caller's
address or `*`, its resource pattern the resource (a Literal name, the Literal `*`, or a Prefixed
name the resource starts with), and its operation the operation — or one implying it: All implies
every operation; Read, Write, Delete and Alter imply Describe; AlterConfigs implies
DescribeConfigs (for Allow only: a Deny of Read does not deny Describe, as in Kafka). When no
binding names the resource at all, `allow.everyone.if.no.acl.found` decides.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Iterable
from typing import Final

from tidelog.common.errors import InvalidRequestError
from tidelog.common.security.authentication.principal import Principal

__all__ = [
    "WILDCARD",
    "AclBinding",
    "AclFilter",
    "Authorizer",
    "Operation",
    "PatternType",
    "Permission",
    "ResourceType",
]

WILDCARD: Final = "*"


class Operation(enum.Enum):
    ALL = "All"
    READ = "Read"
    WRITE = "Write"
    CREATE = "Create"
    DELETE = "Delete"
    ALTER = "Alter"
    DESCRIBE = "Describe"
    CLUSTER_ACTION = "ClusterAction"
    DESCRIBE_CONFIGS = "DescribeConfigs"
    ALTER_CONFIGS = "AlterConfigs"
    IDEMPOTENT_WRITE = "IdempotentWrite"


class Permission(enum.Enum):
    ALLOW = "Allow"
    DENY = "Deny"


class ResourceType(enum.Enum):
    TOPIC = "Topic"
    GROUP = "Group"
    CLUSTER = "Cluster"
    TRANSACTIONAL_ID = "TransactionalId"


class PatternType(enum.Enum):
    LITERAL = "Literal"
    PREFIXED = "Prefixed"


CLUSTER_NAME: Final = "kafka-cluster"  # Kafka's name of the one Cluster resource

# Operations an Allow of the key also allows (Kafka's implication table).
_ALLOWED_BY: Final[dict[Operation, frozenset[Operation]]] = {
    operation: frozenset({operation, Operation.ALL}) for operation in Operation
}
_ALLOWED_BY[Operation.DESCRIBE] = frozenset(
    {Operation.DESCRIBE, Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER, Operation.ALL}
)
_ALLOWED_BY[Operation.DESCRIBE_CONFIGS] = frozenset(
    {Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS, Operation.ALL}
)

# The operations each resource type has (Kafka's; a binding of another is refused).
VALID_OPERATIONS: Final[dict[ResourceType, frozenset[Operation]]] = {
    ResourceType.TOPIC: frozenset(
        {
            Operation.ALL,
            Operation.READ,
            Operation.WRITE,
            Operation.CREATE,
            Operation.DELETE,
            Operation.ALTER,
            Operation.DESCRIBE,
            Operation.DESCRIBE_CONFIGS,
            Operation.ALTER_CONFIGS,
        }
    ),
    ResourceType.GROUP: frozenset({Operation.ALL, Operation.READ, Operation.DELETE, Operation.DESCRIBE}),
    ResourceType.TRANSACTIONAL_ID: frozenset({Operation.ALL, Operation.WRITE, Operation.DESCRIBE}),
    ResourceType.CLUSTER: frozenset(
        {
            Operation.ALL,
            Operation.CREATE,
            Operation.ALTER,
            Operation.DESCRIBE,
            Operation.CLUSTER_ACTION,
            Operation.DESCRIBE_CONFIGS,
            Operation.ALTER_CONFIGS,
            Operation.IDEMPOTENT_WRITE,
        }
    ),
}


def enum_of(kind: type[enum.Enum], text: str, what: str) -> enum.Enum:
    for member in kind:
        if member.value.lower() == text.lower().replace("_", "") or member.name.lower() == text.lower():
            return member
    raise InvalidRequestError(f"{what}: {text!r} is not one of {', '.join(m.value for m in kind)}")


@dataclasses.dataclass(frozen=True, slots=True)
class AclBinding:
    principal: str  # "User:alice", or "User:*"
    host: str  # an address, or "*"
    operation: Operation
    permission: Permission
    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType = PatternType.LITERAL

    def __post_init__(self) -> None:
        try:
            Principal.parse(self.principal)
        except ValueError as error:
            raise InvalidRequestError(f"ACL principal: {error}") from None
        if not self.host:
            raise InvalidRequestError("ACL host: empty (use * for any host)")
        if not self.resource_name:
            raise InvalidRequestError("ACL resource name: empty")
        if self.operation not in VALID_OPERATIONS[self.resource_type]:
            raise InvalidRequestError(
                f"ACL operation {self.operation.value} does not apply to a {self.resource_type.value} resource"
            )
        if self.resource_type is ResourceType.CLUSTER and (
            self.resource_name != CLUSTER_NAME or self.pattern_type is not PatternType.LITERAL
        ):
            raise InvalidRequestError(f"the Cluster resource is the Literal {CLUSTER_NAME!r}")
        if self.pattern_type is PatternType.PREFIXED and self.resource_name == WILDCARD:
            raise InvalidRequestError("a Prefixed pattern of '*' is not allowed (use the Literal '*')")

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "principal": self.principal,
                "host": self.host,
                "operation": self.operation.value,
                "permission": self.permission.value,
                "resource_type": self.resource_type.value,
                "resource_name": self.resource_name,
                "pattern_type": self.pattern_type.value,
            },
            sort_keys=True,
        ).encode()

    @classmethod
    def from_json(cls, data: bytes) -> AclBinding:
        fields = json.loads(data)
        return cls.of(**fields)

    @classmethod
    def of(
        cls,
        *,
        principal: str,
        host: str = WILDCARD,
        operation: str,
        permission: str = "Allow",
        resource_type: str,
        resource_name: str,
        pattern_type: str = "Literal",
    ) -> AclBinding:
        """From the names kafka-acls and Kafka's AdminClient use (case-insensitive)."""
        return cls(
            principal,
            host,
            enum_of(Operation, operation, "ACL operation"),  # type: ignore[arg-type]
            enum_of(Permission, permission, "ACL permission"),  # type: ignore[arg-type]
            enum_of(ResourceType, resource_type, "ACL resource type"),  # type: ignore[arg-type]
            resource_name,
            enum_of(PatternType, pattern_type, "ACL pattern type"),  # type: ignore[arg-type]
        )

    def __str__(self) -> str:
        return (
            f"{self.permission.value} {self.principal} from {self.host} to {self.operation.value} "
            f"{self.resource_type.value}:{self.pattern_type.value}:{self.resource_name}"
        )


@dataclasses.dataclass(frozen=True, slots=True)
class AclFilter:
    """What describe and delete select: each None field matches anything (Kafka's `ANY`)."""

    principal: str | None = None
    host: str | None = None
    operation: Operation | None = None
    permission: Permission | None = None
    resource_type: ResourceType | None = None
    resource_name: str | None = None
    pattern_type: PatternType | None = None

    def matches(self, binding: AclBinding) -> bool:
        return all(
            wanted is None or wanted == actual
            for wanted, actual in (
                (self.principal, binding.principal),
                (self.host, binding.host),
                (self.operation, binding.operation),
                (self.permission, binding.permission),
                (self.resource_type, binding.resource_type),
                (self.resource_name, binding.resource_name),
                (self.pattern_type, binding.pattern_type),
            )
        )


class Authorizer:
    """Decisions over one snapshot of the bindings; `replace()` swaps in a new one (from the
    etcd watch). Decisions are cached per snapshot: a request's checks are dictionary lookups."""

    CACHE_MAX: Final = 100_000

    def __init__(
        self,
        bindings: Iterable[AclBinding] = (),
        *,
        super_users: Iterable[str] = (),
        allow_if_no_acl: bool = False,
    ) -> None:
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_if_no_acl
        self.replace(bindings)

    def replace(self, bindings: Iterable[AclBinding]) -> None:
        literal: dict[tuple[ResourceType, str], list[AclBinding]] = {}
        prefixed: dict[ResourceType, list[AclBinding]] = {}
        for binding in bindings:
            if binding.pattern_type is PatternType.LITERAL:
                literal.setdefault((binding.resource_type, binding.resource_name), []).append(binding)
            else:
                prefixed.setdefault(binding.resource_type, []).append(binding)
        self._literal = literal
        self._prefixed = prefixed
        self._decisions: dict[tuple[str, str, Operation, ResourceType, str], bool] = {}

    def _bindings_for(self, resource_type: ResourceType, name: str) -> list[AclBinding]:
        found = list(self._literal.get((resource_type, name), ()))
        if name != WILDCARD:
            found += self._literal.get((resource_type, WILDCARD), ())
        found += [
            binding for binding in self._prefixed.get(resource_type, ()) if name.startswith(binding.resource_name)
        ]
        return found

    def authorize(
        self, principal: Principal, host: str, operation: Operation, resource_type: ResourceType, name: str
    ) -> bool:
        caller = str(principal)
        key = (caller, host, operation, resource_type, name)
        decision = self._decisions.get(key)
        if decision is None:
            decision = self._decide(key, principal.type)
            if len(self._decisions) >= self.CACHE_MAX:
                self._decisions.clear()
            self._decisions[key] = decision
        return decision

    def authorize_any(self, principal: Principal, host: str, operation: Operation, resource_type: ResourceType) -> bool:
        """Allowed on some resource of the type (Kafka's authorizeByResourceType): a super user, or
        an Allow binding for the caller exists and no Deny on the Literal `*` takes everything away."""
        caller = str(principal)
        if caller in self.super_users:
            return True
        principals = {caller, f"{principal.type}:{WILDCARD}"}
        allowed_by = _ALLOWED_BY[operation]
        denied = any(
            b.permission is Permission.DENY and b.operation in (operation, Operation.ALL)
            for b in self._literal.get((resource_type, WILDCARD), ())
            if b.principal in principals and b.host in (host, WILDCARD)
        )
        if denied:
            return False
        everything = [b for bindings in self._literal.values() for b in bindings] + [
            b for bindings in self._prefixed.values() for b in bindings
        ]
        return any(
            b.resource_type is resource_type
            and b.permission is Permission.ALLOW
            and b.operation in allowed_by
            and b.principal in principals
            and b.host in (host, WILDCARD)
            for b in everything
        )

    def _decide(self, key: tuple[str, str, Operation, ResourceType, str], principal_type: str) -> bool:
        caller, host, operation, resource_type, name = key
        if caller in self.super_users:
            return True
        bindings = self._bindings_for(resource_type, name)
        if not bindings:
            return self.allow_if_no_acl
        principals = {caller, f"{principal_type}:{WILDCARD}"}
        applicable = [b for b in bindings if b.principal in principals and b.host in (host, WILDCARD)]
        if any(b.permission is Permission.DENY and b.operation in (operation, Operation.ALL) for b in applicable):
            return False
        allowed_by = _ALLOWED_BY[operation]
        return any(b.permission is Permission.ALLOW and b.operation in allowed_by for b in applicable)
