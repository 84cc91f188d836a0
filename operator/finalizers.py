"""Release the operator's finalizer from every Topic and ConsumerGroup, so that no resource (and no
namespace holding one) waits for an operator that is gone.

Strimzi's most common complaint is a namespace stuck in Terminating because its topics carry a
finalizer and the operator was uninstalled first. The chart runs this as a `pre-delete` hook of
`helm uninstall` (`tidelog-operator-release-finalizers`), before the operator's Deployment goes: the
resources lose the finalizer and the topics in the cluster are kept, as `deletionPolicy: Retain`
would keep them. Each patch tests the `resourceVersion` it read, so a finalizer someone else added
meanwhile is never dropped; a conflict is read again and retried.
"""

from __future__ import annotations

import argparse
import asyncio
import ssl
import sys
from typing import Any, Final

import aiohttp
import kopf

FINALIZER: Final = "tidelog.io/finalizer"
PLURALS: Final = ("topics", "consumergroups")
API: Final = "/apis/tidelog.io/v1beta1"
CONFLICT_RETRIES: Final = 5  # a resource changing this often is being worked on: give up loudly


def connection() -> kopf.ConnectionInfo:
    """In a pod the service account's; elsewhere the kubeconfig's (as kopf logs in)."""
    settings = kopf.OperatorSettings()
    info = kopf.login_with_service_account(settings=settings) or kopf.login_with_kubeconfig(settings=settings)
    if info is None:
        raise RuntimeError("no Kubernetes credentials: neither a service account nor a kubeconfig")
    return info


def _session(info: kopf.ConnectionInfo) -> aiohttp.ClientSession:
    context: ssl.SSLContext | bool = False if info.insecure else ssl.create_default_context()
    if isinstance(context, ssl.SSLContext):
        if info.ca_path or info.ca_data:
            ca_data = info.ca_data.decode() if isinstance(info.ca_data, bytes) else info.ca_data
            context.load_verify_locations(cafile=info.ca_path, cadata=ca_data)
        if info.certificate_path and info.private_key_path:
            context.load_cert_chain(info.certificate_path, info.private_key_path)
    headers = {"Authorization": f"Bearer {info.token}"} if info.token else {}
    return aiohttp.ClientSession(
        base_url=info.server.rstrip("/") + "/",
        headers=headers,
        connector=aiohttp.TCPConnector(ssl=context),
        timeout=aiohttp.ClientTimeout(total=30),
    )


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


async def release(info: kopf.ConnectionInfo) -> dict[str, int]:
    """Release every Topic and ConsumerGroup in every namespace; how many of each."""
    released: dict[str, int] = {}
    async with _session(info) as session:
        for plural in PLURALS:
            async with session.get(f"{API.lstrip('/')}/{plural}") as answer:
                if answer.status == 404:  # the CRD is gone already: nothing can carry the finalizer
                    released[plural] = 0
                    continue
                answer.raise_for_status()
                items = (await answer.json()).get("items") or []
            done = await asyncio.gather(*(_release_one(session, plural, item) for item in items))
            released[plural] = sum(done)
    return released


def main(argv: list[str] | None = None) -> None:
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args(argv)
    released = asyncio.run(release(connection()))
    print(", ".join(f"{count} {plural}" for plural, count in released.items()) + " released", file=sys.stderr)


if __name__ == "__main__":
    main()
