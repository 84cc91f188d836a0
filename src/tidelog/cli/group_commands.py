"""`tidelog group list | describe | reset-offsets | delete` (as kafka-consumer-groups.sh)."""

from __future__ import annotations

import argparse
import sys

from tidelog.cli.cluster_commands import bootstrap_endpoints, command_security, endpoints, run_command
from tidelog.cli.output import table
from tidelog.client import TopicPartition
from tidelog.client.group_admin import GroupAdmin
from tidelog.common.errors import ErrorCode, error_for

__all__ = ["add_group_commands"]

EARLIEST = -2
LATEST = -1


def _admin(args: argparse.Namespace) -> GroupAdmin:
    bootstrap, _ = bootstrap_endpoints(args)
    return GroupAdmin(bootstrap, security=command_security(args))


async def _list(args: argparse.Namespace) -> int:
    async with _admin(args) as admin:
        groups = await admin.list_groups()
    print(table(["group", "state"], [[group.group_id, group.state] for group in groups]) if groups else "no groups")
    return 0


async def _describe(args: argparse.Namespace) -> int:
    async with _admin(args) as admin:
        group = await admin.describe_group(args.group)
    if group.state == "Dead" and not group.members and not group.partitions:
        # as kafka-consumer-groups.sh, and as `group delete` says of the same group
        raise error_for(ErrorCode.GROUP_ID_NOT_FOUND, f"consumer group {args.group!r} does not exist")
    print(f"group {group.group_id}: {group.state}, generation {group.generation_id}, assignor {group.protocol or '-'}")
    owner = {tp: member.member_id for member in group.members for tp in member.partitions}
    rows = [
        [
            str(lag.partition),
            "-" if lag.committed is None else str(lag.committed),
            str(lag.end_offset),
            "-" if lag.lag is None else str(lag.lag),
            owner.get(lag.partition, "-"),
        ]
        for lag in group.partitions
    ]
    print(table(["partition", "committed", "end offset", "lag", "member"], rows))
    return 0


async def _reset_offsets(args: argparse.Namespace) -> int:
    async with _admin(args) as admin:
        described = await admin.describe_group(args.group)
        partitions = [lag.partition for lag in described.partitions if lag.partition.topic == args.topic]
        if not partitions:
            await admin.consumer.metadata.refresh([args.topic])
            count = len(await admin.consumer.metadata.partitions_of(args.topic))
            partitions = [TopicPartition(args.topic, p) for p in range(count)]
        if args.to_offset is not None:
            offsets = dict.fromkeys(partitions, args.to_offset)
        else:
            offsets = await admin.consumer.list_offsets(partitions, EARLIEST if args.to_earliest else LATEST)
        if args.execute:
            await admin.reset_offsets(args.group, offsets)
    print(table(["partition", "new offset"], [[str(tp), str(offset)] for tp, offset in sorted(offsets.items())]))
    if not args.execute:  # as kafka-consumer-groups.sh: a plan unless told to execute it
        print("dry run: nothing was changed; add --execute to reset these offsets", file=sys.stderr)
    return 0


async def _delete(args: argparse.Namespace) -> int:
    async with _admin(args) as admin:
        results = await admin.delete_groups([args.group])
    error = results[args.group]
    if error is not None:
        raise error
    print(f"deleted group {args.group}")
    return 0


def add_group_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    group = commands.add_parser("group", help="consumer groups: list, describe, reset offsets, delete")
    group_commands = group.add_subparsers(dest="group_command", required=True)
    listing = group_commands.add_parser("list")
    listing.set_defaults(handler=run_command(_list))
    describe = group_commands.add_parser("describe", help="state, members, committed offsets and lag")
    describe.add_argument("group")
    describe.set_defaults(handler=run_command(_describe))
    reset = group_commands.add_parser("reset-offsets", help="for a group without active members")
    reset.add_argument("group")
    reset.add_argument("--topic", required=True)
    target = reset.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-earliest", action="store_true")
    target.add_argument("--to-latest", action="store_true")
    target.add_argument("--to-offset", type=int)
    run_mode = reset.add_mutually_exclusive_group()
    run_mode.add_argument("--execute", action="store_true", help="reset them (without it: only show the plan)")
    run_mode.add_argument("--dry-run", action="store_true", help="only show the plan (the default)")
    reset.set_defaults(handler=run_command(_reset_offsets))
    delete = group_commands.add_parser("delete", help="a group without active members")
    delete.add_argument("group")
    delete.set_defaults(handler=run_command(_delete))
    for parser in (listing, describe, reset, delete):
        endpoints(parser)
