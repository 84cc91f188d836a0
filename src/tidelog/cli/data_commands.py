"""`tidelog produce` and `tidelog consume`: stdin's lines as records (kafka-console-producer), and
records printed as text, JSON or a kcat-style pattern (kafka-console-consumer), by partition or
as a member of a group.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Coroutine
from typing import Any, Final

from tidelog.cli.connection import bootstrap_endpoints, command_security, endpoints, run_command
from tidelog.cli.output import check_record_format, progress, record_line
from tidelog.client import Consumer, GroupConsumer, Producer, TopicPartition
from tidelog.client.cluster_metadata import ClusterMetadata
from tidelog.common.errors import (
    ErrorCode,
    InvalidConfigError,
    TidelogError,
    UnknownTopicOrPartitionError,
)
from tidelog.common.settings import ConsumerSettings, ProducerSettings, Settings, client_keywords

__all__ = ["add_data_commands"]

PRODUCE_CHUNK = 10_000
_REBALANCING: Final = {ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID}


def _properties(items: list[str], option: str, accepted: frozenset[str], scope: type[Settings]) -> dict[str, Any]:
    """NAME=VALUE items → the client's keyword arguments, by the settings registry."""
    configs = {name.strip(): value.strip() for name, _, value in (item.partition("=") for item in items)}
    try:
        return client_keywords(configs, accepted, scope.DEFINITIONS, scope.SCOPE.value)
    except InvalidConfigError as error:
        raise SystemExit(f"error: {option}: {error}") from None


def _property_option(parser: argparse.ArgumentParser, client: str) -> None:
    """--producer-property / --consumer-property NAME=VALUE, as Kafka's console tools take them."""
    parser.add_argument(
        f"--{client}-property",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help=f"any {client} setting by its Kafka name (repeatable; docs/configuration.md), as kafka-console-{client}",
    )


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
    # The console tool's defaults, then --producer-property, then the shortcut flags.
    items = ["acks=all", "linger.ms=5", *args.producer_property]
    items += [f"acks={args.acks}"] if args.acks else []
    items += [f"linger.ms={args.linger_ms}"] if args.linger_ms is not None else []
    configs = _properties(items, "--producer-property", Producer.CONFIGS, ProducerSettings)
    async with Producer(bootstrap, **configs, security=command_security(args)) as producer:
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
        configs = _properties(args.consumer_property, "--consumer-property", GroupConsumer.CONFIGS, ConsumerSettings)
        configs.update(auto_offset_reset=reset, enable_auto_commit=False)
        async with GroupConsumer(bootstrap, args.group, **configs, security=security) as group:
            await _partitions_of(group.metadata, args.topic)
            group.subscribe([args.topic])
            await _print_records(args, group.poll, chosen_format, group.commit)
        return 0
    configs = _properties(args.consumer_property, "--consumer-property", Consumer.CONFIGS, ConsumerSettings)
    configs.update(auto_offset_reset=reset)
    async with Consumer(bootstrap, **configs, security=security) as consumer:
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


def add_data_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
    produce.add_argument("--acks", choices=["0", "1", "all"], help="acknowledgements (default all)")
    produce.add_argument("--linger-ms", type=int, help="wait this long to fill a batch (default 5)")
    _property_option(produce, "producer")
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
    _property_option(consume, "consumer")
    consume.set_defaults(handler=run_command(_consume))
    endpoints(consume)
