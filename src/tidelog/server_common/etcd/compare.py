"""Transaction compares etcd3aio has no helper for."""

from __future__ import annotations

from typing import Any

from etcd3aio._protobuf import Compare

__all__ = ["compare_mod_revision"]


def compare_mod_revision(key: str, mod_revision: int) -> Any:
    """The key was last written at `mod_revision` (optimistic concurrency on one record)."""
    return Compare(result=Compare.EQUAL, target=Compare.MOD, key=key.encode(), mod_revision=mod_revision)
