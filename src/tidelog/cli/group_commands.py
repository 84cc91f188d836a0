"""`tidelog group list | describe | reset-offsets | delete` (as kafka-consumer-groups.sh)."""

from __future__ import annotations

import argparse
import datetime
import sys

from tidelog.cli.connection import bootstrap_endpoints, command_security, endpoints, run_command
from tidelog.cli.output import emit, table
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
    data = [{"group": group.group_id, "state": group.state} for group in groups]
    emit(
        args,
        data,
        lambda: table(["group", "state"], [[g["group"], g["state"]] for g in data]) if data else "no groups",
    )
    return 0


async def _describe(args: argparse.Namespace) -> int:
    async with _admin(args) as admin:
        group = await admin.describe_group(args.group)
    if group.state == "Dead" and not group.members and not group.partitions:
        # as kafka-consumer-groups.sh, and as `group delete` says of the same group
        raise error_for(ErrorCode.GROUP_ID_NOT_FOUND, f"consumer group {args.group!r} does not exist")
    owner = {tp: member.member_id for member in group.members for tp in member.partitions}
    data = {
        "group": group.group_id,
        "state": group.state,
        "generation": group.generation_id,
        "assignor": group.protocol or None,
        "members": [
            {"member_id": m.member_id, "partitions": [str(tp) for tp in sorted(m.partitions)]} for m in group.members
        ],
        "partitions": [
            {
                "topic": lag.partition.topic,
                "partition": lag.partition.partition,
                "committed": lag.committed,
                "end_offset": lag.end_offset,
                "lag": lag.lag,
                "member_id": owner.get(lag.partition),
            }
            for lag in group.partitions
        ],
    }

    def text() -> str:
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
        return (
            f"group {group.group_id}: {group.state}, generation {group.generation_id}, "
            f"assignor {group.protocol or '-'}\n"
            + table(["partition", "committed", "end offset", "lag", "member"], rows)
        )

    emit(args, data, text)
    return 0


def _timestamp_ms(text: str) -> int:
    """--to-datetime as kafka-consumer-groups.sh: ISO 8601, local time unless a zone is given."""
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise SystemExit(f"error: --to-datetime {text!r}: give ISO 8601, e.g. 2026-11-26T08:00:00Z") from None
    if moment.tzinfo is None:
        moment = moment.astimezone()
    return int(moment.timestamp() * 1000)


async def _reset_offsets(args: argparse.Namespace) -> int:
    if not args.all_topics and not args.topic:
        raise SystemExit("error: name the topics: --topic T (repeatable) or --all-topics")
    async with _admin(args) as admin:
        described = await admin.describe_group(args.group)
        if described.members:
            # Kafka refuses too: the members would overwrite the reset with their next commit.
            raise error_for(
                ErrorCode.NON_EMPTY_GROUP,
                f"consumer group {args.group!r} has {len(described.members)} active member(s); stop them first",
            )
        committed = {lag.partition: lag.committed for lag in described.partitions}
        topics = sorted({tp.topic for tp in committed}) if args.all_topics else args.topic
        if args.all_topics and not topics:
            raise error_for(ErrorCode.GROUP_ID_NOT_FOUND, f"consumer group {args.group!r} has no committed offsets")
        partitions: list[TopicPartition] = []
        for topic in topics:
            count = len(await admin.consumer.metadata.partitions_of(topic))
            partitions += [TopicPartition(topic, p) for p in range(count)]
        earliest = await admin.consumer.list_offsets(partitions, EARLIEST)
        latest = await admin.consumer.list_offsets(partitions, LATEST)
        if args.to_offset is not None:
            wanted = dict.fromkeys(partitions, args.to_offset)
        elif args.to_earliest:
            wanted = dict(earliest)
        elif args.to_latest:
            wanted = dict(latest)
        elif args.to_datetime is not None:
            found = await admin.consumer.list_offsets(partitions, _timestamp_ms(args.to_datetime))
            wanted = {tp: latest[tp] if found.get(tp, -1) < 0 else found[tp] for tp in partitions}
        else:  # --shift-by N from the committed offset (from the end where none is committed)
            wanted = {tp: _or(committed.get(tp), latest[tp]) + args.shift_by for tp in partitions}
        # As kafka-consumer-groups.sh: an offset outside the log is moved to its nearest end.
        offsets = {tp: min(max(offset, earliest[tp]), latest[tp]) for tp, offset in wanted.items()}
        if args.execute:
            await admin.reset_offsets(args.group, offsets)
    data = [
        {"topic": tp.topic, "partition": tp.partition, "current": committed.get(tp), "new": offset}
        for tp, offset in sorted(offsets.items())
    ]
    emit(
        args,
        data,
        lambda: table(
            ["partition", "current offset", "new offset"],
            [[f"{d['topic']}-{d['partition']}", "-" if d["current"] is None else d["current"], d["new"]] for d in data],
        ),
    )
    if not args.execute:  # as kafka-consumer-groups.sh: a plan unless told to execute it
        print("dry run: nothing was changed; add --execute to reset these offsets", file=sys.stderr)
    return 0


def _or(committed: int | None, end: int) -> int:
    return end if committed is None else committed


async def _delete(args: argparse.Namespace) -> int:
    async with _admin(args) as admin:
        results = await admin.delete_groups([args.group])
    error = results[args.group]
    if error is not None:
        raise error
    print(f"deleted group {args.group}")
    return 0


def add_group_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    group = commands.add_parser(
        "group", help="consumer groups: list, describe, reset offsets, delete (as kafka-consumer-groups.sh)"
    )
    group_commands = group.add_subparsers(dest="group_command", required=True, metavar="COMMAND")
    listing = group_commands.add_parser("list", help="every group and its state")
    listing.set_defaults(handler=run_command(_list))
    describe = group_commands.add_parser("describe", help="state, members, committed offsets and lag")
    describe.add_argument("group", help="the group id")
    describe.set_defaults(handler=run_command(_describe))
    reset = group_commands.add_parser(
        "reset-offsets",
        help="move a group's committed offsets (a plan unless --execute; the group must have no members)",
    )
    reset.add_argument("group", help="the group id")
    topics = reset.add_mutually_exclusive_group()
    topics.add_argument("--topic", action="append", default=[], help="a topic whose offsets move (repeatable)")
    topics.add_argument("--all-topics", action="store_true", help="every topic the group has committed offsets for")
    target = reset.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-earliest", action="store_true", help="to each partition's earliest offset")
    target.add_argument("--to-latest", action="store_true", help="to each partition's end")
    target.add_argument("--to-offset", type=int, help="to this offset in every partition")
    target.add_argument(
        "--to-datetime", metavar="ISO8601", help="to the first record at or after this time, e.g. 2026-11-26T08:00:00Z"
    )
    target.add_argument(
        "--shift-by", type=int, metavar="N", help="N records forward (negative: back) from the committed"
    )
    run_mode = reset.add_mutually_exclusive_group()
    run_mode.add_argument("--execute", action="store_true", help="reset them (without it: only show the plan)")
    run_mode.add_argument("--dry-run", action="store_true", help="only show the plan (the default)")
    reset.set_defaults(handler=run_command(_reset_offsets))
    delete = group_commands.add_parser("delete", help="delete a group without active members, its offsets too")
    delete.add_argument("group", help="the group id")
    delete.set_defaults(handler=run_command(_delete))
    for parser in (listing, describe, reset, delete):
        endpoints(parser)
