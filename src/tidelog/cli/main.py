"""Entry point of the `tidelog` command."""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import sys

from tidelog.cli.acl_commands import add_acl_commands
from tidelog.cli.cluster_commands import add_cluster_commands
from tidelog.cli.connection import endpoints
from tidelog.cli.dev import add_dev_commands
from tidelog.cli.group_commands import add_group_commands
from tidelog.cli.log_tools import add_log_commands
from tidelog.cli.quota_commands import add_quota_commands
from tidelog.cli.transaction_commands import add_transaction_commands
from tidelog.cli.user_commands import add_user_commands

__all__ = ["main"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tidelog", description="Tidelog, a distributed commit log")
    parser.add_argument("--version", action="version", version=f"tidelog {importlib.metadata.version('tidelog')}")
    endpoints(parser, top_level=True)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_dev_commands(commands)
    add_cluster_commands(commands)
    add_group_commands(commands)
    add_log_commands(commands)
    add_acl_commands(commands)
    add_user_commands(commands)
    add_quota_commands(commands)
    add_transaction_commands(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        status: int = args.handler(args)
    except BrokenPipeError:  # `tidelog log dump ... | head`: the reader left; logs were closed
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    return status


if __name__ == "__main__":
    sys.exit(main())
