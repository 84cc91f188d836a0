"""ACL bindings in etcd: one key per binding, named by a hash of the binding, so adding one is an
idempotent put and removing one a delete; every service follows the prefix (WatchedPrefix)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from etcd3aio import Etcd3Client, prefix_range_end

from tidelog.common.security.authorization.acl import AclBinding, AclFilter
from tidelog.server_common.metadata import ACLS_PREFIX

__all__ = ["acl_key", "add_acls", "bindings_of", "list_acls", "remove_acls"]


def acl_key(binding: AclBinding) -> str:
    return ACLS_PREFIX + hashlib.sha256(binding.to_json()).hexdigest()[:32]


def bindings_of(contents: dict[bytes, bytes]) -> list[AclBinding]:
    return [AclBinding.from_json(value) for value in contents.values()]


async def list_acls(etcd: Etcd3Client, selected: AclFilter | None = None) -> list[AclBinding]:
    assert etcd.kv is not None
    prefix = ACLS_PREFIX.encode()
    response = await etcd.kv.get(prefix, prefix_range_end(prefix))
    found = [AclBinding.from_json(bytes(kv.value)) for kv in response.kvs]
    return sorted((b for b in found if selected is None or selected.matches(b)), key=str)


async def add_acls(etcd: Etcd3Client, bindings: Iterable[AclBinding]) -> None:
    assert etcd.kv is not None
    for binding in bindings:
        await etcd.kv.put(acl_key(binding), binding.to_json())


async def remove_acls(etcd: Etcd3Client, selected: AclFilter) -> list[AclBinding]:
    """Delete the bindings the filter matches; the deleted ones."""
    assert etcd.kv is not None
    deleted = []
    for binding in await list_acls(etcd, selected):
        response = await etcd.kv.delete(acl_key(binding))
        if int(response.deleted):
            deleted.append(binding)
    return deleted
