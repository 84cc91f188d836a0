"""The Secrets a `User` resource owns, over the Kubernetes API (the operator's own credentials):
read, and written as a whole, owned by the resource so they go when it goes."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

import aiohttp

__all__ = ["KubeSecrets", "owner_reference"]


def owner_reference(body: Mapping[str, Any]) -> dict[str, Any]:
    metadata = body["metadata"]
    return {
        "apiVersion": body["apiVersion"],
        "kind": body["kind"],
        "name": metadata["name"],
        "uid": metadata.get("uid", ""),
        "controller": True,
        "blockOwnerDeletion": True,
    }


class KubeSecrets:
    def __init__(self, session: aiohttp.ClientSession) -> None:
        self.session = session

    async def get(self, namespace: str, name: str) -> dict[str, bytes] | None:
        async with self.session.get(f"api/v1/namespaces/{namespace}/secrets/{name}") as response:
            if response.status == 404:
                return None
            response.raise_for_status()
            body = await response.json()
        return {key: base64.b64decode(value) for key, value in (body.get("data") or {}).items()}

    async def put(self, namespace: str, name: str, data: Mapping[str, bytes], owner: Mapping[str, Any]) -> None:
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "Opaque",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": {"app.kubernetes.io/managed-by": "tidelog-operator", "tidelog.io/user": name},
                "ownerReferences": [dict(owner)],
            },
            "data": {key: base64.b64encode(value).decode() for key, value in data.items()},
        }
        path = f"api/v1/namespaces/{namespace}/secrets"
        async with self.session.put(f"{path}/{name}", json=secret) as response:
            if response.status != 404:
                response.raise_for_status()
                return
        async with self.session.post(path, json=secret) as response:
            response.raise_for_status()
