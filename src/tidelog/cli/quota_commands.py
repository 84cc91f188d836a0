"""`tidelog quota alter | describe`: client quotas (as kafka-configs.sh --entity-type users/clients).

tidelog quota alter --user alice --add-config producer_byte_rate=1048576,consumer_byte_rate=2097152
tidelog quota alter --user-default --client-id etl --add-config request_percentage=50
tidelog quota alter --client-default --delete-config producer_byte_rate
tidelog quota describe
"""

from __future__ import annotations

import argparse

from tidelog.cli.connection import admin_client, endpoints, run_command
from tidelog.cli.output import emit, table
from tidelog.common.security.quotas.quota import DEFAULT, QuotaEntity

__all__ = ["add_quota_commands"]


def _entity(args: argparse.Namespace) -> QuotaEntity:
    user = DEFAULT if args.user_default else args.user
    client_id = DEFAULT if args.client_default else args.client_id
    if user is None and client_id is None:
        raise SystemExit("name the entity: --user/--user-default and/or --client-id/--client-default")
    return QuotaEntity(user, client_id)


def _values(text: str) -> dict[str, float]:
    values = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, separator, value = item.partition("=")
        if not separator:
            raise SystemExit(f"--add-config wants NAME=VALUE, got {item!r}")
        try:
            values[name] = float(value)
        except ValueError:
            raise SystemExit(f"--add-config {name}: {value!r} is not a number") from None
    return values


async def _alter(args: argparse.Namespace) -> int:
    entity = _entity(args)
    added = _values(args.add_config or "")
    removed = [name.strip() for name in (args.delete_config or "").split(",") if name.strip()]
    if not added and not removed:
        raise SystemExit("give --add-config and/or --delete-config")
    async with admin_client(args) as admin:
        await admin.alter_client_quotas(entity, added, removed)
    print(f"quotas of {entity} altered")
    return 0


async def _describe(args: argparse.Namespace) -> int:
    async with admin_client(args) as admin:
        quotas = await admin.describe_client_quotas()
    listed = [
        (entity, name, value)
        for entity, values in sorted(quotas.items(), key=lambda item: item[0].key)
        for name, value in sorted(values.items())
    ]
    data = [{"user": e.user, "client_id": e.client_id, "quota": name, "value": value} for e, name, value in listed]
    rows = [[e.user or "-", e.client_id or "-", name, _human(value)] for e, name, value in listed]
    emit(args, data, lambda: table(["user", "client-id", "quota", "value"], rows) if rows else "no quotas")
    return 0


def _human(value: float) -> str:
    """2097152, not 2.09715e+06: a whole number in full, with thousands separated."""
    return f"{int(value):,}" if float(value).is_integer() else f"{value:,}"


def add_quota_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    quota = commands.add_parser("quota", help="client quotas: producer/consumer byte rates, request time")
    quota_commands = quota.add_subparsers(dest="quota_command", required=True, metavar="COMMAND")
    alter = quota_commands.add_parser("alter", help="set or remove a user's or client id's quotas")
    user = alter.add_mutually_exclusive_group()
    user.add_argument("--user", help="a user (principal name)")
    user.add_argument("--user-default", action="store_true", help="the <default> user")
    client = alter.add_mutually_exclusive_group()
    client.add_argument("--client-id", help="a client id (client.id)")
    client.add_argument("--client-default", action="store_true", help="the <default> client id")
    alter.add_argument("--add-config", help="producer_byte_rate=N,consumer_byte_rate=N,request_percentage=N")
    alter.add_argument("--delete-config", help="names of quotas to remove, comma-separated")
    alter.set_defaults(handler=run_command(_alter))
    describe = quota_commands.add_parser("describe", help="every quota set")
    describe.set_defaults(handler=run_command(_describe))
    for parser in (alter, describe):
        endpoints(parser)
