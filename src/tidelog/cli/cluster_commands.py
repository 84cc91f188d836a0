"""`tidelog topic ...`, `tidelog leader elect`, `tidelog produce`, `tidelog consume`, `tidelog cluster describe`.

Endpoints: `--bootstrap host:port,...` (or TIDELOG_BOOTSTRAP); by default those of the local
cluster `tidelog dev up` runs on `--data-dir` (./data).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import sys
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, Final

import grpc

from tidelog.cli.output import progress, table
from tidelog.client import AdminClient, Consumer, Producer, TopicPartition
from tidelog.common.errors import (
    InvalidConfigError,
    TidelogError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from tidelog.common.settings import SecuritySettings, read_properties
from tidelog.local_cluster import announced_cluster

__all__ = ["add_cluster_commands", "bootstrap_endpoints", "command_security", "endpoints", "run_command"]

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
        return _saved_endpoints(saved)
    if (Path("data") / "cluster.json").exists():
        return _saved_endpoints(Path("data") / "cluster.json")
    announced = announced_cluster()
    if announced is not None:
        print(f"using the local cluster of `tidelog dev up` at {announced.data_dir}", file=sys.stderr)
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


def _saved_endpoints(saved: Path) -> tuple[list[str], list[str]]:
    ports = json.loads(saved.read_text())
    brokers = [f"127.0.0.1:{port}" for port in ports["brokers"].values()]
    return (
        _answering(brokers, f"the local cluster of {saved.resolve()}"),
        [f"127.0.0.1:{port}" for port in ports["controllers"].values()],
    )


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
            print(f"error: the cluster did not answer ({error.code().name}): {error.details()}", file=sys.stderr)
            return 1
        except ConnectionError as error:
            print(f"error: the cluster did not answer: {error}", file=sys.stderr)
            return 1

    return run


def _admin(args: argparse.Namespace) -> AdminClient:
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
    async with _admin(args) as admin:
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
    async with _admin(args) as admin:
        for name in await admin.list_topics():
            print(name)
    return 0


async def _topic_describe(args: argparse.Namespace) -> int:
    async with _admin(args) as admin:
        described = await admin.describe_topics([args.name])
    topic = described[args.name]
    if isinstance(topic, TidelogError):
        raise topic
    configs = ", ".join(f"{name}={value}" for name, value in sorted(topic.configs.items())) or "(defaults)"
    print(f"topic {topic.name}: {len(topic.partitions)} partitions; configs: {configs}")
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
    print(table(["partition", "leader", "replicas", "isr", "leader epoch"], rows))
    return 0


async def _topic_alter(args: argparse.Namespace) -> int:
    async with _admin(args) as admin:
        if args.config or args.delete_config:
            _raise_first(await admin.alter_configs(args.name, _configs(args.config), args.delete_config))
        if args.partitions:
            _raise_first(await admin.create_partitions({args.name: args.partitions}))
    print(f"altered topic {args.name}")
    return 0


async def _topic_delete(args: argparse.Namespace) -> int:
    async with _admin(args) as admin:
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
    async with _admin(args) as admin:
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
    async with _admin(args) as admin:
        ongoing = await admin.list_partition_reassignments()
    rows = [
        [
            f"{entry.topic}-{entry.partition}",
            ",".join(map(str, entry.replicas)),
            ",".join(map(str, entry.adding)),
            ",".join(map(str, entry.removing)),
        ]
        for entry in ongoing
    ]
    print(table(["partition", "replicas (RS)", "adding (AR)", "removing (RR)"], rows) if rows else "none under way")
    return 0


async def _leader_elect(args: argparse.Namespace) -> int:
    partitions: list[tuple[str, int]] = []
    if args.topic is not None:
        async with _admin(args) as admin:
            described = (await admin.describe_topics([args.topic]))[args.topic]
        if isinstance(described, TidelogError):
            raise described
        numbers = [args.partition] if args.partition is not None else [p.partition for p in described.partitions]
        partitions = [(args.topic, number) for number in numbers]
    elif args.partition is not None:
        raise SystemExit("--partition needs --topic")
    async with _admin(args) as admin:
        results = await admin.elect_leaders(partitions, unclean=args.type == "unclean")
    print(table(["partition", "result"], _partition_refs(results)))
    return 0


async def _cluster_describe(args: argparse.Namespace) -> int:
    async with _admin(args) as admin:
        cluster = await admin.describe_cluster()
    print(
        f"active controller {cluster.controller_id} at {cluster.controller_endpoint}, epoch {cluster.controller_epoch}"
    )
    print(f"controllers: {', '.join(cluster.controllers)}")
    print(table(["broker", "endpoint", "rack"], [[b.broker_id, f"{b.host}:{b.port}", b.rack] for b in cluster.brokers]))
    return 0


async def _produce(args: argparse.Namespace) -> int:
    bootstrap, _ = bootstrap_endpoints(args)
    sent = 0
    started = time.monotonic()
    async with Producer(
        bootstrap, acks=args.acks, linger_ms=args.linger_ms, security=command_security(args)
    ) as producer:
        deliveries: list[Any] = []
        # At once, as rpk: a missing topic is not auto-created, and a send would wait max.block.ms.
        try:
            await producer.metadata.partitions_of(args.topic)
        except UnknownTopicOrPartitionError:
            raise UnknownTopicOrPartitionError(
                f"topic {args.topic!r} does not exist (create it: tidelog topic create {args.topic})"
            ) from None
        for line in sys.stdin.buffer:
            text = line.rstrip(b"\n")
            key: bytes | None = None
            if args.key_separator:
                key, separator, value = text.partition(args.key_separator.encode())
                text = value if separator else key
                key = key if separator else None
            deliveries.append(await producer.send(args.topic, text, key=key, partition=args.partition))
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
    async with Consumer(bootstrap, auto_offset_reset=reset, security=command_security(args)) as consumer:
        partitions = await consumer.metadata.partitions_of(args.topic)
        chosen = [args.partition] if args.partition is not None else [state.partition for state in partitions]
        consumer.assign([TopicPartition(args.topic, partition) for partition in chosen])
        if args.offset is not None:
            for partition in chosen:
                consumer.seek(TopicPartition(args.topic, partition), args.offset)
        printed = 0
        deadline = time.monotonic() + args.timeout_ms / 1000 if args.timeout_ms else None
        out = sys.stdout.buffer
        while args.max_messages is None or printed < args.max_messages:
            if deadline is not None and time.monotonic() >= deadline:
                break
            for record in await consumer.poll(500):
                if args.print_key:
                    out.write((record.key or b"") + b"\t")
                out.write((record.value or b"") + b"\n")
                printed += 1
                if args.max_messages is not None and printed >= args.max_messages:
                    break
            out.flush()
    return 0


def command_security(args: argparse.Namespace) -> SecuritySettings:
    """--command-config (or $TIDELOG_COMMAND_CONFIG): a properties file of the client's security
    settings (security.protocol, ssl.*, sasl.*), as Kafka's tools take."""
    path = getattr(args, "command_config", None) or os.environ.get("TIDELOG_COMMAND_CONFIG")
    if not path:
        return SecuritySettings.from_configs()
    try:
        return SecuritySettings.from_configs(read_properties(Path(path)))
    except (OSError, InvalidConfigError) as error:
        raise SystemExit(f"--command-config {path}: {error}") from error


def endpoints(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bootstrap", help="broker endpoints host:port,... (default: the dev cluster)")
    parser.add_argument(
        "--command-config", metavar="PATH", help="client security settings (properties file; $TIDELOG_COMMAND_CONFIG)"
    )
    parser.add_argument(
        "--data-dir", default=None, help="a dev cluster's folder (default: ./data, else the one `tidelog dev up` runs)"
    )


def add_cluster_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    _add_topic_commands(commands)
    _add_leader_commands(commands)
    _add_data_commands(commands)
    cluster = commands.add_parser("cluster", help="the cluster's brokers and controllers")
    cluster_commands = cluster.add_subparsers(dest="cluster_command", required=True)
    cluster_describe = cluster_commands.add_parser("describe")
    cluster_describe.set_defaults(handler=run_command(_cluster_describe))
    endpoints(cluster_describe)


def _add_topic_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    topic = commands.add_parser("topic", help="create, list, describe, alter and delete topics")
    topic_commands = topic.add_subparsers(dest="topic_command", required=True)
    create = topic_commands.add_parser("create")
    create.add_argument("name")
    create.add_argument("--partitions", type=int, default=-1)
    create.add_argument("--replication-factor", type=int, default=-1)
    create.add_argument("--config", action="append", default=[], metavar="NAME=VALUE")
    create.add_argument("--if-not-exists", action="store_true", help="a topic of that name already there: not an error")
    create.set_defaults(handler=run_command(_topic_create))
    listing = topic_commands.add_parser("list")
    listing.set_defaults(handler=run_command(_topic_list))
    describe = topic_commands.add_parser("describe")
    describe.add_argument("name")
    describe.set_defaults(handler=run_command(_topic_describe))
    alter = topic_commands.add_parser("alter")
    alter.add_argument("name")
    alter.add_argument("--config", action="append", default=[], metavar="NAME=VALUE")
    alter.add_argument("--delete-config", action="append", default=[], metavar="NAME")
    alter.add_argument("--partitions", type=int, help="new, larger partition count")
    alter.set_defaults(handler=run_command(_topic_alter))
    delete = topic_commands.add_parser("delete")
    delete.add_argument("name")
    delete.set_defaults(handler=run_command(_topic_delete))
    reassign = topic_commands.add_parser("reassign", help="move a partition's replicas, or cancel a move")
    reassign.add_argument("name")
    reassign.add_argument("--partition", type=int, required=True)
    reassign.add_argument("--replicas", help="target broker ids, preferred leader first: 2,3,4")
    reassign.add_argument("--cancel", action="store_true", help="stop the move under way, back to the old replicas")
    reassign.set_defaults(handler=run_command(_topic_reassign))
    reassignments = topic_commands.add_parser("reassignments", help="moves under way")
    reassignments.set_defaults(handler=run_command(_topic_reassignments))
    for parser in (create, listing, describe, alter, delete, reassign, reassignments):
        endpoints(parser)


def _add_leader_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    leader = commands.add_parser("leader", help="leader elections")
    leader_commands = leader.add_subparsers(dest="leader_command", required=True)
    elect = leader_commands.add_parser("elect", help="preferred (default) or unclean leader election")
    elect.add_argument("--topic", help="only this topic (default: every partition)")
    elect.add_argument("--partition", type=int, help="only this partition of --topic")
    elect.add_argument("--type", choices=["preferred", "unclean"], default="preferred")
    elect.set_defaults(handler=run_command(_leader_elect))
    endpoints(elect)


def _add_data_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    produce = commands.add_parser("produce", help="produce lines from stdin, one record each")
    produce.add_argument("topic")
    produce.add_argument("--key-separator", help="split each line into key and value at this string")
    produce.add_argument("--partition", type=int)
    produce.add_argument("--acks", default="all", choices=["0", "1", "all"])
    produce.add_argument("--linger-ms", type=int, default=5)
    produce.set_defaults(handler=run_command(_produce))
    endpoints(produce)

    consume = commands.add_parser("consume", help="print record values to stdout")
    consume.add_argument("topic")
    start = consume.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true")
    start.add_argument("--offset", type=int, help="start at this offset in every chosen partition")
    consume.add_argument("--partition", type=int)
    consume.add_argument("--max-messages", type=int)
    consume.add_argument("--timeout-ms", type=int, default=0, help="stop after this long (0: never)")
    consume.add_argument("--print-key", action="store_true")
    consume.set_defaults(handler=run_command(_consume))
    endpoints(consume)
