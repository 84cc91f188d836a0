"""`tidelog acl add | remove | list`, with kafka-acls.sh's options.

tidelog acl add --allow-principal User:alice --operation Read --operation Describe --topic orders
tidelog acl add --allow-principal User:app --producer --topic orders-  --resource-pattern-type prefixed
tidelog acl add --allow-principal User:app --consumer --topic orders --group billing
tidelog acl remove --allow-principal User:alice --topic orders     (every matching binding)
tidelog acl list [--principal User:alice] [--topic orders | --group g | --cluster]
"""

from __future__ import annotations

import argparse
import itertools
import sys

from tidelog.cli.connection import admin_client, endpoints, run_command
from tidelog.cli.output import emit, table
from tidelog.client import AclBinding, AclFilter
from tidelog.common.security.authorization.acl import (
    CLUSTER_NAME,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    enum_of,
)

__all__ = ["add_acl_commands"]

# kafka-acls' --producer and --consumer shorthands (without transactional ids).
PRODUCER_OPERATIONS = {ResourceType.TOPIC: ("Write", "Describe", "Create")}
CONSUMER_OPERATIONS = {ResourceType.TOPIC: ("Read", "Describe"), ResourceType.GROUP: ("Read",)}


def _resources(args: argparse.Namespace) -> list[tuple[ResourceType, str]]:
    resources = [(ResourceType.TOPIC, name) for name in args.topic]
    resources += [(ResourceType.GROUP, name) for name in args.group]
    if args.cluster:
        resources.append((ResourceType.CLUSTER, CLUSTER_NAME))
    return resources


def _bindings(args: argparse.Namespace) -> list[AclBinding]:
    resources = _resources(args)
    if not resources:
        raise SystemExit("name a resource: --topic, --group or --cluster")
    principals = [(Permission.ALLOW, p, args.allow_host or ["*"]) for p in args.allow_principal]
    principals += [(Permission.DENY, p, args.deny_host or ["*"]) for p in args.deny_principal]
    if not principals:
        raise SystemExit("name a principal: --allow-principal or --deny-principal (User:NAME)")
    pattern = PatternType.PREFIXED if args.resource_pattern_type == "prefixed" else PatternType.LITERAL
    bindings = []
    for (permission, principal, hosts), (resource_type, name) in itertools.product(principals, resources):
        operations = list(args.operation)
        if args.producer:
            operations += PRODUCER_OPERATIONS.get(resource_type, ())
        if args.consumer:
            operations += CONSUMER_OPERATIONS.get(resource_type, ())
        if not operations:
            raise SystemExit("name an operation: --operation (Read, Write, ...), --producer or --consumer")
        for operation, host in itertools.product(dict.fromkeys(operations), hosts):
            bindings.append(
                AclBinding(
                    principal,
                    host,
                    enum_of(Operation, operation, "--operation"),  # type: ignore[arg-type]
                    permission,
                    resource_type,
                    name,
                    pattern if resource_type is not ResourceType.CLUSTER else PatternType.LITERAL,
                )
            )
    return bindings


def _filters(args: argparse.Namespace) -> list[AclFilter]:
    """What `remove` and `list` select: every given option narrows; none given selects all."""
    resources: list[tuple[ResourceType | None, str | None]] = list(_resources(args)) or [(None, None)]
    principals = [*args.allow_principal, *args.deny_principal, *getattr(args, "principal", [])] or [None]
    pattern = {"literal": PatternType.LITERAL, "prefixed": PatternType.PREFIXED}.get(args.resource_pattern_type)
    operations: list[Operation | None] = [
        enum_of(Operation, operation, "--operation")  # type: ignore[misc]
        for operation in args.operation
    ] or [None]
    return [
        AclFilter(
            principal=principal,
            operation=operation,
            resource_type=resource_type,
            resource_name=name,
            pattern_type=pattern,
        )
        for principal, (resource_type, name), operation in itertools.product(principals, resources, operations)
    ]


def _data(bindings: list[AclBinding]) -> list[dict[str, str]]:
    return [
        {
            "principal": b.principal,
            "host": b.host,
            "operation": b.operation.value,
            "permission": b.permission.value,
            "resource_type": b.resource_type.value,
            "pattern_type": b.pattern_type.value,
            "resource_name": b.resource_name,
        }
        for b in bindings
    ]


def _rows(bindings: list[AclBinding]) -> str:
    if not bindings:
        return "no ACLs"
    return table(
        ["principal", "host", "operation", "permission", "resource", "pattern", "name"],
        [
            [
                b.principal,
                b.host,
                b.operation.value,
                b.permission.value,
                b.resource_type.value,
                b.pattern_type.value,
                b.resource_name,
            ]
            for b in bindings
        ],
    )


async def _add(args: argparse.Namespace) -> int:
    bindings = _bindings(args)
    async with admin_client(args) as admin:
        await admin.create_acls(bindings)
        enforced = (await admin.describe_cluster()).authorizer_enabled
    if not enforced:  # Kafka refuses (SECURITY_DISABLED); stored here, they apply once it is on
        print(
            "warning: this cluster runs no authorizer (authorizer.class.name is empty): every request is "
            "allowed and these ACLs take effect only once AclAuthorizer is on (`tidelog dev up --secure`)",
            file=sys.stderr,
        )
    emit(args, _data(bindings), lambda: f"added {len(bindings)} ACL binding(s):\n{_rows(bindings)}")
    return 0


async def _remove(args: argparse.Namespace) -> int:
    if not (_resources(args) or args.allow_principal or args.deny_principal):
        raise SystemExit("remove needs a principal or a resource (it would remove every ACL)")
    async with admin_client(args) as admin:
        removed = await admin.delete_acls(_filters(args))
    emit(
        args,
        _data(removed),
        lambda: f"removed {len(removed)} ACL binding(s):\n{_rows(removed)}" if removed else "no ACL matched",
    )
    return 0


async def _list(args: argparse.Namespace) -> int:
    async with admin_client(args) as admin:
        found = {binding for selected in _filters(args) for binding in await admin.describe_acls(selected)}
    listed = sorted(found, key=str)
    emit(args, _data(listed), lambda: _rows(listed))
    return 0


def _resource_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--topic", action="append", default=[], help="a topic (repeatable; '*' for all)")
    parser.add_argument("--group", action="append", default=[], help="a consumer group (repeatable; '*' for all)")
    parser.add_argument("--cluster", action="store_true", help="the cluster resource")
    parser.add_argument(
        "--resource-pattern-type",
        choices=("literal", "prefixed", "any"),
        default=None,
        help="literal (default for add), prefixed; remove and list match any by default",
    )
    parser.add_argument(
        "--operation", action="append", default=[], help="Read, Write, Create, Delete, Alter, Describe, ..."
    )


def add_acl_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    acl = commands.add_parser("acl", help="access control lists (as kafka-acls.sh)")
    acl_commands = acl.add_subparsers(dest="acl_command", required=True, metavar="COMMAND")
    for name, handler, what in (
        ("add", _add, "add ACL bindings: principals × resources × operations"),
        ("remove", _remove, "remove every binding the options match"),
    ):
        parser = acl_commands.add_parser(name, help=what)
        parser.add_argument(
            "--allow-principal", action="append", default=[], metavar="User:NAME", help="allowed (repeatable)"
        )
        parser.add_argument(
            "--deny-principal", action="append", default=[], metavar="User:NAME", help="denied (repeatable)"
        )
        parser.add_argument(
            "--allow-host", action="append", default=[], metavar="HOST", help="only from this host (default: *)"
        )
        parser.add_argument(
            "--deny-host", action="append", default=[], metavar="HOST", help="deny from this host (default: *)"
        )
        parser.add_argument("--producer", action="store_true", help="Write, Describe, Create on the topics")
        parser.add_argument("--consumer", action="store_true", help="Read, Describe on the topics, Read on the groups")
        _resource_options(parser)
        parser.set_defaults(handler=run_command(handler))
        endpoints(parser)
    listing = acl_commands.add_parser("list", help="bindings the options match (all without options)")
    listing.add_argument(
        "--principal", action="append", default=[], metavar="User:NAME", help="only this principal's (repeatable)"
    )
    listing.set_defaults(handler=run_command(_list), allow_principal=[], deny_principal=[])
    _resource_options(listing)
    endpoints(listing)
