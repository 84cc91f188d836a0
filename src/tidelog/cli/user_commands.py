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

from tidelog.cli.cluster_commands import bootstrap_endpoints, command_security, endpoints, run_command
from tidelog.cli.output import table
from tidelog.client import AdminClient

__all__ = ["add_user_commands"]


def _admin(args: argparse.Namespace) -> AdminClient:
    bootstrap, controllers = bootstrap_endpoints(args)
    return AdminClient(bootstrap, controllers=controllers, security=command_security(args))


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
    async with _admin(args) as admin:
        results = await admin.alter_user_scram_credentials({args.name: _password(args)}, iterations=args.iterations)
    error = results.get(args.name)
    if error is not None:
        raise error
    print(f"user {args.name}: SCRAM-SHA-512 credential set ({args.iterations} iterations)")
    return 0


async def _delete(args: argparse.Namespace) -> int:
    async with _admin(args) as admin:
        results = await admin.alter_user_scram_credentials(deletions=[args.name])
    error = results.get(args.name)
    if error is not None:
        raise error
    print(f"user {args.name}: SCRAM-SHA-512 credential deleted")
    return 0


async def _list(args: argparse.Namespace) -> int:
    async with _admin(args) as admin:
        users = await admin.describe_user_scram_credentials()
    if not users:
        print("no users")
    else:
        print(table(["user", "mechanism", "iterations"], [[u, "SCRAM-SHA-512", n] for u, n in sorted(users.items())]))
    return 0


def add_user_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    user = commands.add_parser("user", help="SCRAM-SHA-512 users: create, delete, list")
    user_commands = user.add_subparsers(dest="user_command", required=True)
    create = user_commands.add_parser("create", help="create a user or change its password")
    create.add_argument("name")
    create.add_argument("--password-file", help="a file holding the password (else $TIDELOG_USER_PASSWORD)")
    create.add_argument("--iterations", type=int, default=4096, help="PBKDF2 iterations (4096..16384)")
    create.set_defaults(handler=run_command(_create))
    delete = user_commands.add_parser("delete")
    delete.add_argument("name")
    delete.set_defaults(handler=run_command(_delete))
    listing = user_commands.add_parser("list")
    listing.set_defaults(handler=run_command(_list))
    for parser in (create, delete, listing):
        endpoints(parser)
