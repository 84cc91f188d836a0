"""`tidelog topic ...`, `tidelog leader elect`, `tidelog cluster describe` (produce and consume: data_commands.py).

Endpoints: `--bootstrap host:port,...` (or TIDELOG_BOOTSTRAP); by default those of the local
cluster `tidelog dev up` runs on `--data-dir` (./data).
"""

from __future__ import annotations

import argparse

from tidelog.cli.connection import admin_client, endpoints, run_command
from tidelog.cli.data_commands import add_data_commands
from tidelog.cli.output import emit, table
from tidelog.common.errors import (
    TidelogError,
    TopicAlreadyExistsError,
)

__all__ = ["add_cluster_commands"]


def _configs(items: list[str]) -> dict[str, str]:
    pairs = {}
    for item in items:
        name, separator, value = item.partition("=")
        if not separator:
            raise SystemExit(f"--config wants NAME=VALUE, got {item!r}")
        pairs[name] = value
    return pairs


def _raise_first(results: dict[str, TidelogError | None]) -> None:
    for error in results.values():
        if error is not None:
            raise error


async def _topic_create(args: argparse.Namespace) -> int:
    async with admin_client(args) as admin:
        try:
            await admin.create_topic(args.name, args.partitions, args.replication_factor, _configs(args.config))
        except TopicAlreadyExistsError:
            if not args.if_not_exists:
                raise
            print(f"topic {args.name} exists already")  # kafka-topics.sh --if-not-exists: nothing to do
            return 0
    print(f"created topic {args.name}")
    return 0


async def _topic_list(args: argparse.Namespace) -> int:
    async with admin_client(args) as admin:
        names = await admin.list_topics()
    emit(args, names, lambda: "\n".join(names))
    return 0


async def _topic_describe(args: argparse.Namespace) -> int:
    async with admin_client(args) as admin:
        described = await admin.describe_topics([args.name])
    topic = described[args.name]
    if isinstance(topic, TidelogError):
        raise topic
    data = {
        "name": topic.name,
        "configs": dict(sorted(topic.configs.items())),
        "partitions": [
            {
                "partition": p.partition,
                "leader": p.leader if p.leader >= 0 else None,
                "replicas": list(p.replicas),
                "isr": list(p.isr),
                "leader_epoch": p.leader_epoch,
            }
            for p in topic.partitions
        ],
    }

    def text() -> str:
        configs = ", ".join(f"{name}={value}" for name, value in sorted(topic.configs.items())) or "(defaults)"
        rows = [
            [
                p.partition,
                p.leader if p.leader >= 0 else "none",
                ",".join(map(str, p.replicas)),
                ",".join(map(str, p.isr)),
                p.leader_epoch,
            ]
            for p in topic.partitions
        ]
        return f"topic {topic.name}: {len(topic.partitions)} partitions; configs: {configs}\n" + table(
            ["partition", "leader", "replicas", "isr", "leader epoch"], rows
        )

    emit(args, data, text)
    return 0


async def _topic_alter(args: argparse.Namespace) -> int:
    async with admin_client(args) as admin:
        if args.config or args.delete_config:
            _raise_first(await admin.alter_configs(args.name, _configs(args.config), args.delete_config))
        if args.partitions:
            _raise_first(await admin.create_partitions({args.name: args.partitions}))
    print(f"altered topic {args.name}")
    return 0


async def _topic_delete(args: argparse.Namespace) -> int:
    async with admin_client(args) as admin:
        _raise_first(await admin.delete_topics([args.name]))
    print(f"deleted topic {args.name}")
    return 0


def _partition_refs(results: dict[tuple[str, int], TidelogError | None]) -> list[list[object]]:
    return [
        [f"{topic}-{partition}", "ok" if error is None else str(error)]
        for (topic, partition), error in sorted(results.items())
    ]


async def _topic_reassign(args: argparse.Namespace) -> int:
    if args.cancel == bool(args.replicas):
        raise SystemExit("give either --replicas B1,B2,... or --cancel")
    target = None if args.cancel else [int(broker) for broker in args.replicas.split(",")]
    async with admin_client(args) as admin:
        results = await admin.alter_partition_reassignments({(args.name, args.partition): target})
    error = results[(args.name, args.partition)]
    if error is not None:
        raise error
    if args.cancel:
        print(f"cancelled the reassignment of {args.name}-{args.partition}")
    else:
        print(f"reassigning {args.name}-{args.partition} to {target}; follow it with `tidelog topic reassignments`")
    return 0


async def _topic_reassignments(args: argparse.Namespace) -> int:
    async with admin_client(args) as admin:
        ongoing = await admin.list_partition_reassignments()
    data = [
        {
            "topic": entry.topic,
            "partition": entry.partition,
            "replicas": list(entry.replicas),
            "adding": list(entry.adding),
            "removing": list(entry.removing),
        }
        for entry in ongoing
    ]
    rows = [
        [
            f"{entry.topic}-{entry.partition}",
            ",".join(map(str, entry.replicas)),
            ",".join(map(str, entry.adding)),
            ",".join(map(str, entry.removing)),
        ]
        for entry in ongoing
    ]
    emit(
        args,
        data,
        lambda: (
            table(["partition", "replicas (RS)", "adding (AR)", "removing (RR)"], rows) if rows else "none under way"
        ),
    )
    return 0


async def _leader_elect(args: argparse.Namespace) -> int:
    partitions: list[tuple[str, int]] = []
    if args.topic is not None:
        async with admin_client(args) as admin:
            described = (await admin.describe_topics([args.topic]))[args.topic]
        if isinstance(described, TidelogError):
            raise described
        numbers = [args.partition] if args.partition is not None else [p.partition for p in described.partitions]
        partitions = [(args.topic, number) for number in numbers]
    elif args.partition is not None:
        raise SystemExit("--partition needs --topic")
    async with admin_client(args) as admin:
        results = await admin.elect_leaders(partitions, unclean=args.type == "unclean")
    data = [
        {"topic": topic, "partition": partition, "error": None if error is None else str(error)}
        for (topic, partition), error in sorted(results.items())
    ]
    emit(args, data, lambda: table(["partition", "result"], _partition_refs(results)))
    return 0


async def _cluster_describe(args: argparse.Namespace) -> int:
    async with admin_client(args) as admin:
        cluster = await admin.describe_cluster()
    data = {
        "controller_id": cluster.controller_id,
        "controller_endpoint": cluster.controller_endpoint,
        "controller_epoch": cluster.controller_epoch,
        "controllers": list(cluster.controllers),
        "authorizer": cluster.authorizer_enabled,
        "brokers": [{"id": b.broker_id, "host": b.host, "port": b.port, "rack": b.rack} for b in cluster.brokers],
    }
    emit(
        args,
        data,
        lambda: (
            f"active controller {cluster.controller_id} at {cluster.controller_endpoint}, "
            f"epoch {cluster.controller_epoch}\n"
            f"controllers: {', '.join(cluster.controllers)}\n"
            f"ACL authorizer: {'on' if cluster.authorizer_enabled else 'off (every request is allowed)'}\n"
            + table(
                ["broker", "endpoint", "rack"], [[b.broker_id, f"{b.host}:{b.port}", b.rack] for b in cluster.brokers]
            )
        ),
    )
    return 0


def add_cluster_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    _add_topic_commands(commands)
    _add_leader_commands(commands)
    add_data_commands(commands)
    cluster = commands.add_parser("cluster", help="the cluster's brokers and controllers")
    cluster_commands = cluster.add_subparsers(dest="cluster_command", required=True, metavar="COMMAND")
    cluster_describe = cluster_commands.add_parser(
        "describe", help="the active controller, every controller and broker, whether ACLs are enforced"
    )
    cluster_describe.set_defaults(handler=run_command(_cluster_describe))
    endpoints(cluster_describe)


def _add_topic_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    topic = commands.add_parser(
        "topic", help="create, list, describe, alter, delete and reassign topics (as kafka-topics.sh)"
    )
    topic_commands = topic.add_subparsers(dest="topic_command", required=True, metavar="COMMAND")
    create = topic_commands.add_parser("create", help="create a topic")
    create.add_argument("name", help="topic name: letters, digits, '.', '_', '-'; at most 249 characters")
    create.add_argument(
        "--partitions", type=int, default=-1, help="partition count (default: the cluster's num.partitions)"
    )
    create.add_argument(
        "--replication-factor",
        type=int,
        default=-1,
        help="replicas of each partition (default: the cluster's default.replication.factor)",
    )
    create.add_argument(
        "--config", action="append", default=[], metavar="NAME=VALUE", help="a topic config (repeatable)"
    )
    create.add_argument("--if-not-exists", action="store_true", help="a topic of that name already there: not an error")
    create.set_defaults(handler=run_command(_topic_create))
    listing = topic_commands.add_parser("list", help="every topic's name")
    listing.set_defaults(handler=run_command(_topic_list))
    describe = topic_commands.add_parser("describe", help="partitions, leaders, replicas, ISR and configs")
    describe.add_argument("name", help="the topic")
    describe.set_defaults(handler=run_command(_topic_describe))
    alter = topic_commands.add_parser("alter", help="change configs or grow the partition count")
    alter.add_argument("name", help="the topic")
    alter.add_argument(
        "--config", action="append", default=[], metavar="NAME=VALUE", help="set a topic config (repeatable)"
    )
    alter.add_argument(
        "--delete-config", action="append", default=[], metavar="NAME", help="back to the default (repeatable)"
    )
    alter.add_argument("--partitions", type=int, help="new, larger partition count (only grows, as Kafka)")
    alter.set_defaults(handler=run_command(_topic_alter))
    delete = topic_commands.add_parser("delete", help="delete a topic and its data")
    delete.add_argument("name", help="the topic")
    delete.set_defaults(handler=run_command(_topic_delete))
    reassign = topic_commands.add_parser("reassign", help="move a partition's replicas, or cancel a move")
    reassign.add_argument("name", help="the topic")
    reassign.add_argument("--partition", type=int, required=True, help="the partition to move")
    reassign.add_argument("--replicas", help="target broker ids, preferred leader first: 2,3,4")
    reassign.add_argument("--cancel", action="store_true", help="stop the move under way, back to the old replicas")
    reassign.set_defaults(handler=run_command(_topic_reassign))
    reassignments = topic_commands.add_parser("reassignments", help="moves under way")
    reassignments.set_defaults(handler=run_command(_topic_reassignments))
    for parser in (create, listing, describe, alter, delete, reassign, reassignments):
        endpoints(parser)


def _add_leader_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    leader = commands.add_parser("leader", help="leader elections")
    leader_commands = leader.add_subparsers(dest="leader_command", required=True, metavar="COMMAND")
    elect = leader_commands.add_parser("elect", help="preferred (default) or unclean leader election")
    elect.add_argument("--topic", help="only this topic (default: every partition)")
    elect.add_argument("--partition", type=int, help="only this partition of --topic")
    elect.add_argument(
        "--type",
        choices=["preferred", "unclean"],
        default="preferred",
        help="preferred: back to each partition's first replica; unclean: an out-of-sync replica may lead",
    )
    elect.set_defaults(handler=run_command(_leader_elect))
    endpoints(elect)
