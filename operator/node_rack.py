"""The broker's rack from its node's zone label: `tidelog-node-rack --node NAME --output FILE`.

Kafka spreads a partition's replicas over racks (`broker.rack`) so that losing one zone loses no
partition. On Kubernetes the zone is a label of the node the pod landed on
(`topology.kubernetes.io/zone`), which a pod cannot read from the downward API. As Strimzi does, the
chart runs this command in the broker pod's init container: it reads the Node through the API
server and writes the label's value to a file the broker's command passes as `--rack`.

A node without the label gives an empty rack (the broker runs without one, as outside Kubernetes),
said on stderr. An API server that cannot be reached is retried until `--timeout-s`, then the
command fails and Kubernetes restarts the init container: a broker never starts with a rack it
guessed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys
import time
from pathlib import Path
from typing import Final

import aiohttp

from tidelog.operator.kube_api import ConnectionInfo, connection, session

__all__ = ["main", "node_label", "parse_args"]

DEFAULT_LABEL: Final = "topology.kubernetes.io/zone"
RETRY_S: Final = 1.0
# A rack becomes one command-line word and a metadata string: a label value's own syntax
# (Kubernetes: ≤ 63 characters of [A-Za-z0-9_.-]), anything else is refused rather than passed on.
LABEL_VALUE: Final = re.compile(r"[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?")


class NodeNotFoundError(LookupError):
    pass


async def node_label(info: ConnectionInfo, node: str, label: str, *, timeout_s: float) -> str:
    """The value of `label` on `node` ("" when the node has no such label)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            async with session(info) as api, api.get(f"api/v1/nodes/{node}") as answer:
                if answer.status == 404:
                    raise NodeNotFoundError(f"node {node!r} not found")
                if 400 <= answer.status < 500:  # e.g. 403: the role lacks `get nodes`; waiting will not help
                    raise PermissionError(f"node {node!r}: {answer.status} {await answer.text()}")
                answer.raise_for_status()
                labels = ((await answer.json()).get("metadata") or {}).get("labels") or {}
        except (aiohttp.ClientError, TimeoutError) as error:
            if time.monotonic() + RETRY_S > deadline:
                raise TimeoutError(f"Kubernetes API not reachable in {timeout_s:g} s: {error}") from error
            print(f"node {node}: {error}; retrying", file=sys.stderr)
            await asyncio.sleep(RETRY_S)
            continue
        value = str(labels.get(label, ""))
        if value and not LABEL_VALUE.fullmatch(value):
            raise ValueError(f"node {node!r}: label {label}={value!r} is not a valid rack name")
        return value


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--node", default=os.environ.get("NODE_NAME"), help="the node's name (default: $NODE_NAME)")
    parser.add_argument("--label", default=DEFAULT_LABEL, help=f"the node label holding the rack ({DEFAULT_LABEL})")
    parser.add_argument("--output", type=Path, required=True, help="file to write the rack to")
    parser.add_argument("--timeout-s", type=float, default=60.0, help="how long to retry an unreachable API")
    args = parser.parse_args(argv)
    if not args.node:
        parser.error("--node is required (or NODE_NAME from the downward API's spec.nodeName)")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    try:
        rack = asyncio.run(node_label(connection(), args.node, args.label, timeout_s=args.timeout_s))
    except (NodeNotFoundError, PermissionError, TimeoutError, ValueError) as error:
        sys.exit(f"tidelog-node-rack: {error}")
    if not rack:
        print(f"node {args.node} has no label {args.label}: the broker runs without a rack", file=sys.stderr)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    temporary = args.output.with_name(args.output.name + ".tmp")
    temporary.write_text(rack)
    temporary.replace(args.output)  # the broker never reads half a name
    print(f"node {args.node}: rack {rack!r}", file=sys.stderr)


if __name__ == "__main__":
    main()
