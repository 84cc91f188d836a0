"""`tidelog dev`: the command line of the development tools. What the commands run is the dev
package's (`tidelog.dev.up`), imported only when one runs: the services' image installs the CLI
without the `dev` extra."""

from __future__ import annotations

import argparse

__all__ = ["add_dev_commands"]


def _up(args: argparse.Namespace) -> int:
    try:
        from tidelog.dev.up import up  # noqa: PLC0415 - the dev extra, only when the command runs
    except ImportError as missing:
        raise SystemExit(f"`tidelog dev` needs the dev extra: pip install 'tidelog[dev]' ({missing})") from None
    return up(args)


def add_dev_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    dev = commands.add_parser("dev", help="run Tidelog locally")
    dev_commands = dev.add_subparsers(dest="dev_command", required=True, metavar="COMMAND")
    up = dev_commands.add_parser(
        "up", help="start etcd, controllers, brokers, coordinators and the REST gateway until Ctrl-C"
    )
    up.add_argument(
        "--data-dir", default=argparse.SUPPRESS, metavar="DIR", help="folder for all local data (default: ./data)"
    )
    up.add_argument("--brokers", type=int, default=3, help="broker processes (default 3)")
    up.add_argument("--controllers", type=int, default=2, help="controller processes, one active (default 2)")
    up.add_argument("--coordinators", type=int, default=2, help="group coordinator instances")
    up.add_argument("--gateways", type=int, default=1, help="REST gateway replicas (authentication off)")
    up.add_argument(
        "--secure",
        action="store_true",
        help="TLS and SCRAM logins on every listener, the ACL authorizer on; writes DIR/client.properties",
    )
    up.set_defaults(handler=_up)
