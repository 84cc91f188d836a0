"""Reads of the cluster's registry in etcd that several services need: live brokers, the cluster id."""

from __future__ import annotations

import asyncio
import base64
import time
import uuid

from etcd3aio import Etcd3Client, prefix_range_end
from etcd3aio.kv import KVService

from tidelog.server_common.metadata import BROKERS_PREFIX, CLUSTER_ID_KEY, BrokerRegistration

__all__ = ["cluster_id", "created_once", "registered_brokers"]

POLL_INTERVAL_S = 0.5


async def registered_brokers(etcd: Etcd3Client, *, wait_s: float = 60.0) -> list[str]:
    """Endpoints of the registered brokers; waits up to `wait_s` for at least one (a cluster starting)."""
    assert etcd.kv is not None
    deadline = time.monotonic() + wait_s
    prefix = BROKERS_PREFIX.encode()
    while True:
        found = [
            BrokerRegistration.from_json(kv.value).endpoint
            for kv in (await etcd.kv.get(prefix, prefix_range_end(prefix))).kvs
        ]
        if found or time.monotonic() > deadline:
            return found
        await asyncio.sleep(POLL_INTERVAL_S)


async def created_once(etcd: Etcd3Client, key: str, fresh: bytes) -> bytes:
    """The value at `key`: `fresh`, written there by whoever asks first, or what the first wrote."""
    assert etcd.kv is not None
    response = await etcd.kv.txn(
        compare=[KVService.txn_compare_create_revision(key, 0)],
        success=[KVService.txn_op_put(key, fresh)],
        failure=[KVService.txn_op_get(key)],
    )
    if response.succeeded:
        return fresh
    return bytes(response.responses[0].response_range.kvs[0].value)


async def cluster_id(etcd: Etcd3Client) -> str:
    """The cluster's id (22 characters of URL-safe base64, as Kafka's), created by whoever asks first."""
    return (
        await created_once(etcd, CLUSTER_ID_KEY, base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"="))
    ).decode()
