"""Release the operator's finalizer from every resource it finalizes (Topic, ConsumerGroup and User:
each kind with a delete handler carries kopf's finalizer), so that no resource (and no namespace
holding one) waits for an operator that is gone.

Strimzi's most common complaint is a namespace stuck in Terminating because its topics carry a
finalizer and the operator was uninstalled first. The chart runs this as a `pre-delete` hook of
`helm uninstall` (`tidelog-operator-release-finalizers`), before the operator's Deployment goes: the
resources lose the finalizer and what they stand for in the cluster (topics, groups, users and
their ACLs) is kept, as `deletionPolicy: Retain` would keep a topic. Each patch tests the
`resourceVersion` it read, so a finalizer someone else added meanwhile is never dropped; a conflict
is read again and retried.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from typing import Any, Final

import aiohttp

from tidelog.operator.crds import FINALIZED_CRDS
from tidelog.operator.kube_api import ConnectionInfo, connection, session

FINALIZER: Final = "tidelog.io/finalizer"
PLURALS: Final = tuple(crd["spec"]["names"]["plural"] for crd in FINALIZED_CRDS)
API: Final = "/apis/tidelog.io/v1beta1"
CONFLICT_RETRIES: Final = 5  # a resource changing this often is being worked on: give up loudly


async def _release_one(session: aiohttp.ClientSession, plural: str, item: dict[str, Any]) -> bool:
    """Remove our finalizer from one resource; False if it did not carry it."""
    for _ in range(CONFLICT_RETRIES):
        metadata = item["metadata"]
        finalizers = list(metadata.get("finalizers") or [])
        if FINALIZER not in finalizers:
            return False
        patch = [
            {"op": "test", "path": "/metadata/resourceVersion", "value": metadata["resourceVersion"]},
            {"op": "replace", "path": "/metadata/finalizers", "value": [f for f in finalizers if f != FINALIZER]},
        ]
        path = f"{API.lstrip('/')}/namespaces/{metadata['namespace']}/{plural}/{metadata['name']}"
        headers = {"Content-Type": "application/json-patch+json"}
        async with session.patch(path, json=patch, headers=headers) as answer:
            if answer.status == 404:
                return False  # gone meanwhile: nothing to release
            if answer.status not in (409, 422):  # the version moved on: read it again
                answer.raise_for_status()
                return True
        async with session.get(path) as answer:
            if answer.status == 404:
                return False
            answer.raise_for_status()
            item = await answer.json()
    raise RuntimeError(f"{plural} {metadata['namespace']}/{metadata['name']} kept changing; finalizer not released")


async def release(info: ConnectionInfo, namespaces: Sequence[str] = ()) -> dict[str, int]:
    """Release every resource of each finalized kind in `namespaces` (every namespace when none:
    what the operator's ClusterRole allows with watchAnyNamespace, its Roles otherwise); how many
    of each."""
    released: dict[str, int] = {}
    scopes = [f"namespaces/{namespace}/" for namespace in namespaces] or [""]
    async with session(info) as api:
        for plural in PLURALS:
            released[plural] = 0
            for scope in scopes:
                async with api.get(f"{API.lstrip('/')}/{scope}{plural}") as answer:
                    if answer.status == 404:  # the CRD is gone already: nothing can carry the finalizer
                        continue
                    answer.raise_for_status()
                    items = (await answer.json()).get("items") or []
                done = await asyncio.gather(*(_release_one(api, plural, item) for item in items))
                released[plural] += sum(done)
    return released


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--namespace", action="append", default=[], help="release only in these (default: every namespace)"
    )
    args = parser.parse_args(argv)
    released = asyncio.run(release(connection(), args.namespace))
    print(", ".join(f"{count} {plural}" for plural, count in released.items()) + " released", file=sys.stderr)


if __name__ == "__main__":
    main()
