"""`tidelog topic ...`, `tidelog leader elect`, `tidelog produce`, `tidelog consume`, `tidelog cluster describe`.

Endpoints: `--bootstrap host:port,...` (or TIDELOG_BOOTSTRAP); by default those of the local
cluster `tidelog dev up` runs on `--data-dir` (./data).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import sys
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, Final

import grpc

from tidelog.cli.output import check_record_format, emit, format_option, progress, record_line, table
from tidelog.client import AdminClient, Consumer, GroupConsumer, Producer, TopicPartition
from tidelog.client.cluster_metadata import ClusterMetadata
from tidelog.common.errors import (
    ErrorCode,
    InvalidConfigError,
    TidelogError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from tidelog.common.local_endpoints import CLIENT_PROPERTIES, announced_cluster, saved_endpoints
from tidelog.common.settings import SecuritySettings, read_properties

__all__ = [
    "add_cluster_commands",
    "admin_client",
    "bootstrap_endpoints",
    "command_security",
    "endpoints",
    "run_command",
]

PRODUCE_CHUNK = 10_000


KNOCK_TIMEOUT_S: Final = 1.0  # a broker that does not accept a connection within this is not there


def bootstrap_endpoints(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """The cluster a command talks to: --bootstrap (or $TIDELOG_BOOTSTRAP); else the dev cluster of
    --data-dir; else ./data's; else the one this user's `tidelog dev up` runs, wherever it is; else
    localhost:9092, as Kafka's tools default. A guess is said on stderr. Before any long wait the
    brokers are knocked on: when none answers, the command ends at once saying where it looked."""
    if args.bootstrap or os.environ.get("TIDELOG_BOOTSTRAP"):
        given = (args.bootstrap or os.environ["TIDELOG_BOOTSTRAP"]).split(",")
        return _answering(given, "--bootstrap" if args.bootstrap else "$TIDELOG_BOOTSTRAP"), []
    if args.data_dir is not None:
        saved = Path(args.data_dir) / "cluster.json"
        if not saved.exists():
            raise SystemExit(f"no local cluster at {saved} (run `tidelog dev up --data-dir {args.data_dir}` first)")
        return _saved_endpoints(args, saved)
    if (Path("data") / "cluster.json").exists():
        return _saved_endpoints(args, Path("data") / "cluster.json")
    announced = announced_cluster()
    if announced is not None:
        print(f"using the local cluster of `tidelog dev up` at {announced.data_dir}", file=sys.stderr)
        args.local_client_config = Path(announced.data_dir) / CLIENT_PROPERTIES
        return _answering(announced.bootstrap, f"the `tidelog dev up` at {announced.data_dir}"), announced.controllers
    print(
        "no --bootstrap given and no local cluster running (`tidelog dev up`): trying localhost:9092",
        file=sys.stderr,
    )
    return _answering(["localhost:9092"], "no --bootstrap given, no local cluster found"), []


def _answering(endpoints: list[str], source: str) -> list[str]:
    """`endpoints` if one of them accepts a connection; else the command ends, saying where it
    looked and what to do (a stopped cluster would otherwise cost a request timeout first)."""
    for endpoint in endpoints:
        host, _, port = endpoint.rpartition(":")
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=KNOCK_TIMEOUT_S):
                return endpoints
        except (OSError, ValueError):
            continue
    raise SystemExit(
        f"error: no broker answers at {', '.join(endpoints)} ({source}). Is the cluster running? "
        "`tidelog dev up` starts a local one; --bootstrap host:port names another."
    )


def _saved_endpoints(args: argparse.Namespace, saved: Path) -> tuple[list[str], list[str]]:
    # A `dev up --secure` cluster's client settings, which its commands use unless given others.
    args.local_client_config = saved.parent / CLIENT_PROPERTIES
    brokers, controllers = saved_endpoints(saved)
    return _answering(brokers, f"the local cluster of {saved.resolve()}"), controllers


def run_command(
    handler: Callable[[argparse.Namespace], Coroutine[Any, Any, int]],
) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        try:
            return asyncio.run(handler(args))
        except BrokenPipeError:  # `... | head`: the reader left (a ConnectionError, but not the cluster's)
            raise
        except TidelogError as error:
            print(f"error: {error}", file=sys.stderr)
            return 1
        except grpc.aio.AioRpcError as error:  # nothing answers there: say where, not a traceback
            print(
                f"error: the cluster did not answer ({error.code().name}): {error.details()}{_hint(str(error))}",
                file=sys.stderr,
            )
            return 1
        except ConnectionError as error:
            print(f"error: the cluster did not answer: {error}{_hint(str(error))}", file=sys.stderr)
            return 1

    return run


def _hint(message: str) -> str:
    """A listener that closes a plaintext connection speaks TLS: say what settings it wants."""
    if "Socket closed" in message or "handshake" in message.lower():
        return (
            "\n  the listener closed the connection: if it speaks TLS or SASL_SSL, give --command-config "
            "with security.protocol, ssl.ca.location and sasl.* (docs/security.md)"
        )
    return ""


def admin_client(args: argparse.Namespace) -> AdminClient:
    bootstrap, controllers = bootstrap_endpoints(args)
    return AdminClient(bootstrap, controllers=controllers, security=command_security(args))


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


def _headers(items: list[str]) -> tuple[tuple[str, bytes], ...]:
    pairs = []
    for item in items:
        name, separator, value = item.partition(":")
        if not separator or not name:
            raise SystemExit(f"error: --header wants NAME:VALUE, got {item!r}")
        pairs.append((name, value.encode()))
    return tuple(pairs)


async def _produce(args: argparse.Namespace) -> int:
    bootstrap, _ = bootstrap_endpoints(args)
    headers = _headers(args.header) or None
    fixed_key = None if args.key is None else args.key.encode()
    separator = args.key_separator.encode() if args.key_separator else None
    sent = 0
    started = time.monotonic()
    async with Producer(
        bootstrap, acks=args.acks, linger_ms=args.linger_ms, security=command_security(args)
    ) as producer:
        deliveries: list[Any] = []
        # At once, as rpk: a missing topic is not auto-created, and a send would wait max.block.ms.
        partitions = await _partitions_of(producer.metadata, args.topic)
        if args.partition is not None and not 0 <= args.partition < len(partitions):
            raise UnknownTopicOrPartitionError(
                f"topic {args.topic!r} has partitions 0 to {len(partitions) - 1}, not {args.partition}"
            )
        for line in sys.stdin.buffer:
            text = line.rstrip(b"\n")
            key = fixed_key
            if separator is not None:
                head, found, value = text.partition(separator)
                if found:
                    key, text = head, value
            deliveries.append(await producer.send(args.topic, text, key=key, partition=args.partition, headers=headers))
            sent += 1
            if len(deliveries) >= PRODUCE_CHUNK:
                for delivery in deliveries:
                    await delivery
                deliveries.clear()
                progress(f"{sent} records acknowledged")
        await producer.flush()
        for delivery in deliveries:
            await delivery
    progress("")
    print(f"produced {sent} records to {args.topic} in {time.monotonic() - started:.2f} s", file=sys.stderr)
    return 0


async def _consume(args: argparse.Namespace) -> int:
    bootstrap, _ = bootstrap_endpoints(args)
    reset = "earliest" if args.from_beginning else "latest"
    chosen_format = getattr(args, "format", None) or "text"
    check_record_format(chosen_format)
    security = command_security(args)
    if args.group is not None:
        if args.partition is not None or args.offset is not None:
            raise SystemExit("error: --group takes the group's partitions and offsets; leave out --partition/--offset")
        async with GroupConsumer(
            bootstrap, args.group, auto_offset_reset=reset, enable_auto_commit=False, security=security
        ) as group:
            await _partitions_of(group.metadata, args.topic)
            group.subscribe([args.topic])
            await _print_records(args, group.poll, chosen_format, group.commit)
        return 0
    async with Consumer(bootstrap, auto_offset_reset=reset, security=security) as consumer:
        count = len(await _partitions_of(consumer.metadata, args.topic))
        chosen = [args.partition] if args.partition is not None else list(range(count))
        consumer.assign([TopicPartition(args.topic, partition) for partition in chosen])
        if args.offset is not None:
            for partition in chosen:
                consumer.seek(TopicPartition(args.topic, partition), args.offset)
        await _print_records(args, consumer.poll, chosen_format, None)
    return 0


async def _partitions_of(metadata: ClusterMetadata, topic: str) -> list[Any]:
    """The topic's partitions; a topic that does not exist says how to create it."""
    try:
        return await metadata.partitions_of(topic)
    except UnknownTopicOrPartitionError:
        raise UnknownTopicOrPartitionError(
            f"topic {topic!r} does not exist (create it: tidelog topic create {topic})"
        ) from None


async def _print_records(
    args: argparse.Namespace,
    poll: Callable[[int], Coroutine[Any, Any, list[Any]]],
    chosen_format: str,
    commit: Callable[[dict[TopicPartition, int]], Coroutine[Any, Any, None]] | None,
) -> None:
    """Print until --max-messages or --timeout-ms; with a group, commit what was printed after each
    poll (kafka-console-consumer's auto commit, but never past a record not yet printed)."""
    printed = 0
    deadline = time.monotonic() + args.timeout_ms / 1000 if args.timeout_ms else None
    out = sys.stdout.buffer
    while args.max_messages is None or printed < args.max_messages:
        if deadline is not None and time.monotonic() >= deadline:
            break
        records = await poll(500)
        if args.max_messages is not None:
            records = records[: args.max_messages - printed]
        for record in records:
            out.write(record_line(record, chosen_format, args.print_key))
        printed += len(records)
        out.flush()
        if commit is not None and records:
            try:
                await commit({TopicPartition(r.topic, r.partition): r.offset + 1 for r in records})
            except TidelogError as error:  # a rebalance: the next owner reads them again (at least once)
                if not (error.retriable or error.code in _REBALANCING):
                    raise
                print(f"commit not taken ({error}); reading on", file=sys.stderr)


_REBALANCING: Final = {ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID}


def command_security(args: argparse.Namespace) -> SecuritySettings:
    """--command-config (or $TIDELOG_COMMAND_CONFIG): a properties file of the client's security
    settings (security.protocol, ssl.*, sasl.*), as Kafka's tools take; else, for the local cluster
    of `tidelog dev up --secure`, the client.properties it wrote. Call after `bootstrap_endpoints`."""
    path = getattr(args, "command_config", None) or os.environ.get("TIDELOG_COMMAND_CONFIG")
    local: Path | None = getattr(args, "local_client_config", None)
    if not path and local is not None and local.exists():
        path = str(local)
    if not path:
        return SecuritySettings.from_configs()
    try:
        return SecuritySettings.from_configs(read_properties(Path(path)))
    except (OSError, InvalidConfigError) as error:
        raise SystemExit(f"--command-config {path}: {error}") from error


def endpoints(parser: argparse.ArgumentParser, *, top_level: bool = False) -> None:
    """The options every cluster command takes, accepted before the command or after it
    (`tidelog --bootstrap h:9092 topic list` as `tidelog topic list --bootstrap h:9092`): the top
    level holds the defaults, a command's own copies set a value only when given."""
    default: dict[str, Any] = {} if top_level else {"default": argparse.SUPPRESS}
    parser.add_argument(
        "--bootstrap",
        metavar="HOST:PORT,...",
        help="broker endpoints ($TIDELOG_BOOTSTRAP; default: the running `tidelog dev up` cluster)",
        **default,
    )
    parser.add_argument(
        "--command-config",
        metavar="PATH",
        help="client security settings, a properties file: security.protocol, ssl.*, sasl.* ($TIDELOG_COMMAND_CONFIG)",
        **default,
    )
    parser.add_argument(
        "--data-dir",
        metavar="DIR",
        help="a dev cluster's folder (default: ./data, else the one `tidelog dev up` runs)",
        **default,
    )
    format_option(parser, default=None if top_level else argparse.SUPPRESS)


def add_cluster_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    _add_topic_commands(commands)
    _add_leader_commands(commands)
    _add_data_commands(commands)
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


def _add_data_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    produce = commands.add_parser(
        "produce",
        help="produce stdin's lines, one record each (as kafka-console-producer)",
        description="Each line of stdin becomes one record's value. The topic must exist.",
    )
    produce.add_argument("topic", help="an existing topic")
    key = produce.add_mutually_exclusive_group()
    key.add_argument(
        "--key-separator",
        metavar="SEP",
        help="split each line at the first SEP into key and value (a line without SEP has no key)",
    )
    key.add_argument("-k", "--key", help="the same key on every record")
    produce.add_argument(
        "-H",
        "--header",
        action="append",
        default=[],
        metavar="NAME:VALUE",
        help="a header on every record (repeatable)",
    )
    produce.add_argument("-p", "--partition", type=int, help="write to this partition (default: by key, as Kafka)")
    produce.add_argument("--acks", default="all", choices=["0", "1", "all"], help="acknowledgements (default all)")
    produce.add_argument("--linger-ms", type=int, default=5, help="wait this long to fill a batch (default 5)")
    produce.set_defaults(handler=run_command(_produce))
    endpoints(produce)

    consume = commands.add_parser(
        "consume",
        help="print records to stdout (as kafka-console-consumer)",
        description="Prints each record's value on a line; -o json prints every field as JSON, and a pattern "
        "prints what kcat's -f does: %%t topic, %%p partition, %%o offset, %%T timestamp, %%k key, %%v value, "
        "%%K/%%S key/value size, %%h headers, \\n newline, e.g. -o '%%p:%%o %%k=%%v\\n'.",
    )
    consume.add_argument("topic", help="an existing topic")
    start = consume.add_mutually_exclusive_group()
    start.add_argument(
        "--from-beginning", action="store_true", help="start at the earliest offset where none is committed"
    )
    start.add_argument("--offset", type=int, help="start at this offset in every chosen partition")
    consume.add_argument("-p", "--partition", type=int, help="only this partition (default: all)")
    consume.add_argument(
        "-g", "--group", help="consume as a member of this group, committing what was printed (partitions shared)"
    )
    consume.add_argument("-n", "--max-messages", type=int, help="stop after this many records")
    consume.add_argument("--timeout-ms", type=int, default=0, help="stop after this long (0: never)")
    consume.add_argument("--print-key", action="store_true", help="text format: print KEY<tab>VALUE")
    consume.set_defaults(handler=run_command(_consume))
    endpoints(consume)
