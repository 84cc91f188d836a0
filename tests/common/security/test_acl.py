"""Kafka's ACL decision rules (tidelog.common.security.authorization.acl), principal × operation × pattern."""

from __future__ import annotations

import pytest

from tidelog.common.errors import InvalidRequestError
from tidelog.common.security.authentication.principal import Principal, PrincipalMapper
from tidelog.common.security.authorization.acl import AclBinding, AclFilter, Authorizer, Operation, ResourceType

ALICE = Principal("User", "alice")
BOB = Principal("User", "bob")
T = ResourceType.TOPIC
G = ResourceType.GROUP
C = ResourceType.CLUSTER


def acl(
    principal: str,
    operation: str,
    resource: str,
    name: str,
    *,
    permission: str = "Allow",
    pattern: str = "Literal",
    host: str = "*",
) -> AclBinding:
    return AclBinding.of(
        principal=principal,
        host=host,
        operation=operation,
        permission=permission,
        resource_type=resource,
        resource_name=name,
        pattern_type=pattern,
    )


def test_literal_wildcard_and_prefixed_patterns() -> None:
    authorizer = Authorizer(
        [
            acl("User:alice", "Write", "Topic", "orders"),
            acl("User:alice", "Read", "Topic", "logs-", pattern="Prefixed"),
            acl("User:*", "Describe", "Topic", "*"),
        ]
    )
    assert authorizer.authorize(ALICE, "10.0.0.1", Operation.WRITE, T, "orders")
    assert not authorizer.authorize(ALICE, "10.0.0.1", Operation.WRITE, T, "orders2")  # literal is exact
    assert authorizer.authorize(ALICE, "10.0.0.1", Operation.READ, T, "logs-app")
    assert not authorizer.authorize(ALICE, "10.0.0.1", Operation.READ, T, "log")
    assert authorizer.authorize(BOB, "10.0.0.1", Operation.DESCRIBE, T, "anything")  # User:* on *
    assert not authorizer.authorize(BOB, "10.0.0.1", Operation.READ, T, "logs-app")


def test_deny_wins_over_allow_and_all_implies_everything() -> None:
    authorizer = Authorizer(
        [
            acl("User:alice", "All", "Topic", "*"),
            acl("User:alice", "Read", "Topic", "secret-", permission="Deny", pattern="Prefixed"),
        ]
    )
    assert authorizer.authorize(ALICE, "h", Operation.READ, T, "public")
    assert authorizer.authorize(ALICE, "h", Operation.DELETE, T, "public")
    assert not authorizer.authorize(ALICE, "h", Operation.READ, T, "secret-pay")
    # A Deny of Read does not deny Describe or Write (Kafka's rules).
    assert authorizer.authorize(ALICE, "h", Operation.DESCRIBE, T, "secret-pay")
    assert authorizer.authorize(ALICE, "h", Operation.WRITE, T, "secret-pay")
    deny_all = Authorizer(
        [acl("User:alice", "Read", "Topic", "x"), acl("User:alice", "All", "Topic", "x", permission="Deny")]
    )
    assert not deny_all.authorize(ALICE, "h", Operation.READ, T, "x")


def test_implied_operations() -> None:
    for operation in ("Read", "Write", "Delete", "Alter"):
        authorizer = Authorizer([acl("User:alice", operation, "Topic", "t")])
        assert authorizer.authorize(ALICE, "h", Operation.DESCRIBE, T, "t"), operation
        assert not authorizer.authorize(ALICE, "h", Operation.CREATE, T, "t"), operation
    alter_configs = Authorizer([acl("User:alice", "AlterConfigs", "Topic", "t")])
    assert alter_configs.authorize(ALICE, "h", Operation.DESCRIBE_CONFIGS, T, "t")
    assert not alter_configs.authorize(ALICE, "h", Operation.DESCRIBE, T, "t")


def test_hosts_super_users_and_no_acl_found() -> None:
    authorizer = Authorizer([acl("User:alice", "Read", "Group", "g", host="10.0.0.1")], super_users=["User:root"])
    assert authorizer.authorize(ALICE, "10.0.0.1", Operation.READ, G, "g")
    assert not authorizer.authorize(ALICE, "10.0.0.2", Operation.READ, G, "g")
    assert authorizer.authorize(Principal("User", "root"), "x", Operation.DELETE, G, "g")
    # No binding names the resource: allow.everyone.if.no.acl.found decides.
    assert not authorizer.authorize(ALICE, "h", Operation.READ, G, "other")
    assert Authorizer([], allow_if_no_acl=True).authorize(ALICE, "h", Operation.READ, G, "other")
    # ... but one naming it for someone else is an ACL found: others are refused.
    assert not Authorizer([acl("User:bob", "Read", "Group", "g")], allow_if_no_acl=True).authorize(
        ALICE, "h", Operation.READ, G, "g"
    )


def test_decisions_follow_a_replaced_snapshot() -> None:
    authorizer = Authorizer([acl("User:alice", "Write", "Topic", "t")])
    assert authorizer.authorize(ALICE, "h", Operation.WRITE, T, "t")  # cached now
    authorizer.replace([])
    assert not authorizer.authorize(ALICE, "h", Operation.WRITE, T, "t")


def test_authorize_any_of_a_type() -> None:
    prefixed = acl("User:alice", "Write", "Topic", "t-", pattern="Prefixed")
    authorizer = Authorizer([prefixed])
    assert authorizer.authorize_any(ALICE, "h", Operation.WRITE, T)
    assert not authorizer.authorize_any(BOB, "h", Operation.WRITE, T)
    authorizer.replace([prefixed, acl("User:alice", "Write", "Topic", "*", permission="Deny")])
    assert not authorizer.authorize_any(ALICE, "h", Operation.WRITE, T)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"operation": "Read", "resource_type": "Cluster", "resource_name": "kafka-cluster"}, "does not apply"),
        ({"operation": "Alter", "resource_type": "Cluster", "resource_name": "other"}, "Literal 'kafka-cluster'"),
        ({"operation": "Fly", "resource_type": "Topic", "resource_name": "t"}, "is not one of"),
        ({"operation": "Read", "resource_type": "Topic", "resource_name": "*", "pattern_type": "Prefixed"}, "Prefixed"),
        ({"operation": "Read", "resource_type": "Topic", "resource_name": ""}, "empty"),
        ({"principal": "alice", "operation": "Read", "resource_type": "Topic", "resource_name": "t"}, "TYPE:NAME"),
    ],
)
def test_bad_bindings_are_refused_with_the_reason(fields: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidRequestError, match=message):
        AclBinding.of(**{"principal": "User:alice", **fields})


def test_bindings_round_trip_and_filters() -> None:
    binding = acl("User:alice", "read", "TOPIC", "t", pattern="prefixed")  # names are case-insensitive
    assert AclBinding.from_json(binding.to_json()) == binding
    assert AclFilter(principal="User:alice").matches(binding)
    assert AclFilter(operation=Operation.READ, resource_type=T).matches(binding)
    assert not AclFilter(operation=Operation.WRITE).matches(binding)


def test_principal_mapping_rules_as_kafka_documents_them() -> None:
    mapper = PrincipalMapper(
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,"
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,"
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U,"
        "DEFAULT"
    )
    assert mapper.map("CN=kafka1,OU=ServiceUsers,O=Org,C=US") == Principal("User", "kafka1")
    assert mapper.map("CN=Adam,OU=Sales,O=Unknown,L=x,ST=y,C=z") == Principal("User", "adam@sales")
    assert mapper.map("cn=duke,O=sun") == Principal("User", "DUKE")
    assert mapper.map("OU=none") == Principal("User", "OU=none")  # DEFAULT
    assert PrincipalMapper("RULE:^CN=([^,]*),O=acme$/$1/").map("CN=x,O=other") is None  # no rule: refused
    for bad in ("", "RULE:abc", "NOPE", "RULE:(/x/", "DEFAULT DEFAULT"):
        with pytest.raises(Exception, match=r"ssl\.principal\.mapping\.rules"):
            PrincipalMapper(bad)
