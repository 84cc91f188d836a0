"""Where the active controller is, read from its election in etcd (the oldest candidate's key)."""

from __future__ import annotations

from etcd3aio import Etcd3Client, SortOrder, SortTarget, prefix_range_end

from tidelog.server_common.metadata import CONTROLLER_ELECTION_PREFIX, ControllerRecord

__all__ = ["active_controller_endpoint"]


async def active_controller_endpoint(etcd: Etcd3Client) -> str:
    """host:port of the elected controller, or "" when none is."""
    assert etcd.kv is not None
    prefix = (CONTROLLER_ELECTION_PREFIX + "/").encode()
    listing = await etcd.kv.get(
        prefix, prefix_range_end(prefix), sort_order=SortOrder.ASCEND, sort_target=SortTarget.CREATE, limit=1
    )
    if not listing.kvs:
        return ""
    return ControllerRecord.from_json(listing.kvs[0].value).endpoint
