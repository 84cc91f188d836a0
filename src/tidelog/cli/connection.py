"""How a `tidelog` command finds and talks to a cluster: the endpoint options every cluster
command takes (`--bootstrap`, `--command-config`, `--data-dir`), where endpoints come from when
none are given (TIDELOG_BOOTSTRAP, ./data, the running `tidelog dev up`, localhost:9292), the
client security settings, and running a command with errors said plainly.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, Final

import grpc

from tidelog.cli.output import format_option
from tidelog.client import AdminClient
from tidelog.common.errors import (
    InvalidConfigError,
    TidelogError,
)
from tidelog.common.local_endpoints import CLIENT_PROPERTIES, announced_cluster, saved_endpoints
from tidelog.common.settings import SecuritySettings, read_properties

__all__ = ["admin_client", "bootstrap_endpoints", "command_security", "endpoints", "run_command"]

KNOCK_TIMEOUT_S: Final = 1.0  # a broker that does not accept a connection within this is not there


def bootstrap_endpoints(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """The cluster a command talks to: --bootstrap (or $TIDELOG_BOOTSTRAP); else the dev cluster of
    --data-dir; else ./data's; else the one this user's `tidelog dev up` runs, wherever it is; else
    localhost:9292, the brokers' gRPC port under `dev up` (9092 is their Kafka listener's). A guess
    is said on stderr. Before any long wait the brokers are knocked on: when none answers, the
    command ends at once saying where it looked."""
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
        "no --bootstrap given and no local cluster running (`tidelog dev up`): trying localhost:9292",
        file=sys.stderr,
    )
    return _answering(["localhost:9292"], "no --bootstrap given, no local cluster found"), []


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
    (`tidelog --bootstrap h:9292 topic list` as `tidelog topic list --bootstrap h:9292`): the top
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
