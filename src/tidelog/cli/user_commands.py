"""`tidelog user create | delete | list`: SCRAM-SHA-512 users (as kafka-configs.sh --alter
--add-config 'SCRAM-SHA-512=[password=...]' --entity-type users).

The password is read from --password-file, or $TIDELOG_USER_PASSWORD, or asked for on a terminal;
never from the command line, where `ps` would show it. It is salted and hashed here.
"""

from __future__ import annotations

import argparse
import getpass
import os
import sys
from pathlib import Path

from tidelog.cli.connection import admin_client, endpoints, run_command
from tidelog.cli.output import emit, table

__all__ = ["add_user_commands"]


def _password(args: argparse.Namespace) -> str:
    if args.password_file:
        password = Path(args.password_file).read_text().rstrip("\n")
    elif os.environ.get("TIDELOG_USER_PASSWORD"):
        password = os.environ["TIDELOG_USER_PASSWORD"]
    elif sys.stdin.isatty():
        password = getpass.getpass(f"password for {args.name}: ")
    else:
        raise SystemExit("give the password in --password-file or $TIDELOG_USER_PASSWORD")
    if len(password) < 8:
        raise SystemExit("the password must have at least 8 characters")
    return password


async def _create(args: argparse.Namespace) -> int:
    async with admin_client(args) as admin:
        results = await admin.alter_user_scram_credentials({args.name: _password(args)}, iterations=args.iterations)
    error = results.get(args.name)
    if error is not None:
        raise error
    print(f"user {args.name}: SCRAM-SHA-512 credential set ({args.iterations} iterations)")
    return 0


async def _delete(args: argparse.Namespace) -> int:
    async with admin_client(args) as admin:
        results = await admin.alter_user_scram_credentials(deletions=[args.name])
    error = results.get(args.name)
    if error is not None:
        raise error
    print(f"user {args.name}: SCRAM-SHA-512 credential deleted")
    return 0


async def _list(args: argparse.Namespace) -> int:
    async with admin_client(args) as admin:
        users = await admin.describe_user_scram_credentials()
    data = [{"user": u, "mechanism": "SCRAM-SHA-512", "iterations": n} for u, n in sorted(users.items())]
    emit(
        args,
        data,
        lambda: table(["user", "mechanism", "iterations"], [list(d.values()) for d in data]) if data else "no users",
    )
    return 0


def add_user_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    user = commands.add_parser("user", help="SCRAM-SHA-512 users: create, delete, list")
    user_commands = user.add_subparsers(dest="user_command", required=True, metavar="COMMAND")
    create = user_commands.add_parser("create", help="create a user or change its password")
    create.add_argument("name", help="the user name (its principal is User:NAME)")
    create.add_argument("--password-file", help="a file holding the password (else $TIDELOG_USER_PASSWORD)")
    create.add_argument("--iterations", type=int, default=4096, help="PBKDF2 iterations (4096..16384)")
    create.set_defaults(handler=run_command(_create))
    delete = user_commands.add_parser("delete", help="delete a user's credential")
    delete.add_argument("name", help="the user name")
    delete.set_defaults(handler=run_command(_delete))
    listing = user_commands.add_parser("list", help="every user with a SCRAM credential")
    listing.set_defaults(handler=run_command(_list))
    for parser in (create, delete, listing):
        endpoints(parser)
