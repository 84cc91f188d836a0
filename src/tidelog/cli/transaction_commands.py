"""`tidelog transactions list | describe | describe-producers | find-hanging | abort` (as
kafka-transactions.sh, KIP-664)."""

from __future__ import annotations

import argparse

from tidelog.cli.connection import bootstrap_endpoints, command_security, endpoints, run_command
from tidelog.cli.output import emit, table
from tidelog.client import TopicPartition
from tidelog.client.transaction_admin import (
    MAX_TIMEOUT_MS_DEFAULT,
    ProducerState,
    TransactionAdmin,
    TransactionDescription,
)
from tidelog.common.errors import ErrorCode, error_for

__all__ = ["add_transaction_commands"]


def _admin(args: argparse.Namespace) -> TransactionAdmin:
    bootstrap, _ = bootstrap_endpoints(args)
    return TransactionAdmin(bootstrap, security=command_security(args))


async def _list(args: argparse.Namespace) -> int:
    async with _admin(args) as admin:
        listed = await admin.list_transactions(args.state or ())
    data = [{"transactional_id": t.transactional_id, "producer_id": t.producer_id, "state": t.state} for t in listed]
    emit(
        args,
        data,
        lambda: (
            table(["transactional id", "producer id", "state"], [list(d.values()) for d in data])
            if data
            else "no transactional ids"
        ),
    )
    return 0


async def _describe(args: argparse.Namespace) -> int:
    async with _admin(args) as admin:
        found = (await admin.describe_transactions([args.transactional_id]))[args.transactional_id]
    if not isinstance(found, TransactionDescription):
        raise found
    data = {
        "transactional_id": found.transactional_id,
        "state": found.state,
        "producer_id": found.producer_id,
        "producer_epoch": found.producer_epoch,
        "timeout_ms": found.timeout_ms,
        "start_time_ms": None if found.start_time_ms < 0 else found.start_time_ms,
        "partitions": [str(tp) for tp in found.partitions],
    }
    emit(args, data, lambda: table(list(data), [[", ".join(v) if isinstance(v, list) else v for v in data.values()]]))
    return 0


def _producer_row(tp: TopicPartition, p: ProducerState) -> dict[str, object]:
    return {
        "partition": str(tp),
        "producer_id": p.producer_id,
        "producer_epoch": p.producer_epoch,
        "last_sequence": p.last_sequence,
        "coordinator_epoch": p.coordinator_epoch,
        "current_transaction_start_offset": None if p.current_txn_start_offset < 0 else p.current_txn_start_offset,
    }


def _producer_rows(rows: list[dict[str, object]]) -> str:
    headers = ["partition", "producer id", "epoch", "last sequence", "coordinator epoch", "open transaction from"]
    return table(headers, [list(row.values()) for row in rows]) if rows else "no producers"


async def _describe_producers(args: argparse.Namespace) -> int:
    tp = TopicPartition(args.topic, args.partition)
    async with _admin(args) as admin:
        producers = await admin.describe_producers(tp)
    data = [_producer_row(tp, p) for p in producers]
    emit(args, data, lambda: _producer_rows(data))
    return 0


async def _find_hanging(args: argparse.Namespace) -> int:
    async with _admin(args) as admin:
        partitions = []
        for topic in args.topic:
            count = len(await admin.metadata.partitions_of(topic))
            partitions += [TopicPartition(topic, p) for p in range(count)]
        hanging = await admin.find_hanging(partitions, max_timeout_ms=args.max_transaction_timeout_ms)
    data = [_producer_row(tp, p) for tp, p in hanging]
    emit(args, data, lambda: _producer_rows(data) if data else "no hanging transactions")
    return 0


async def _abort(args: argparse.Namespace) -> int:
    tp = TopicPartition(args.topic, args.partition)
    async with _admin(args) as admin:
        if args.start_offset is not None:  # as kafka-transactions.sh: find the producer by its start
            found = [p for p in await admin.describe_producers(tp) if p.current_txn_start_offset == args.start_offset]
            if not found:
                raise error_for(
                    ErrorCode.INVALID_TXN_STATE, f"no transaction open in {tp} starts at offset {args.start_offset}"
                )
            producer_id, epoch, coordinator_epoch = (
                found[0].producer_id,
                found[0].producer_epoch,
                found[0].coordinator_epoch,
            )
        else:
            if args.producer_id is None or args.producer_epoch is None:
                raise SystemExit("error: give --start-offset, or --producer-id and --producer-epoch")
            producer_id, epoch, coordinator_epoch = args.producer_id, args.producer_epoch, args.coordinator_epoch
        await admin.abort_transaction(tp, producer_id, epoch, max(coordinator_epoch, 0))
    print(f"aborted producer {producer_id}'s transaction in {tp}")
    return 0


def add_transaction_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    transactions = commands.add_parser(
        "transactions", help="transactions: list, describe, producers, hanging ones, abort (as kafka-transactions.sh)"
    )
    sub = transactions.add_subparsers(dest="transactions_command", required=True, metavar="COMMAND")
    listing = sub.add_parser("list", help="every transactional id, its producer id and state")
    listing.add_argument("--state", action="append", help="only this state, e.g. Ongoing (repeatable)")
    listing.set_defaults(handler=run_command(_list))
    describe = sub.add_parser("describe", help="a transactional id's state and open transaction")
    describe.add_argument("transactional_id", help="the transactional.id")
    describe.set_defaults(handler=run_command(_describe))
    producers = sub.add_parser("describe-producers", help="the producers a partition's leader knows")
    hanging = sub.add_parser(
        "find-hanging", help="transactions open in a partition that their coordinator does not list as ongoing"
    )
    hanging.add_argument("--topic", action="append", required=True, help="a topic to search (repeatable)")
    hanging.add_argument(
        "--max-transaction-timeout-ms",
        type=int,
        default=MAX_TIMEOUT_MS_DEFAULT,
        help="the cluster's transaction.max.timeout.ms: only transactions open longer are suspects",
    )
    hanging.set_defaults(handler=run_command(_find_hanging))
    abort = sub.add_parser("abort", help="abort a producer's open transaction in one partition (ClusterAction)")
    for parser in (producers, abort):
        parser.add_argument("--topic", required=True, help="the partition's topic")
        parser.add_argument("--partition", type=int, required=True, help="the partition number")
    producers.set_defaults(handler=run_command(_describe_producers))
    abort.add_argument("--start-offset", type=int, help="the transaction that starts at this offset")
    abort.add_argument("--producer-id", type=int, help="instead of --start-offset: the producer's id")
    abort.add_argument("--producer-epoch", type=int, help="with --producer-id: its epoch in the partition")
    abort.add_argument(
        "--coordinator-epoch", type=int, default=0, help="with --producer-id: its last marker's coordinator epoch"
    )
    abort.set_defaults(handler=run_command(_abort))
    for parser in (listing, describe, producers, hanging, abort):
        endpoints(parser)
