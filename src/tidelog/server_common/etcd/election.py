"""Leader election over etcd, shaped like etcd's clientv3/concurrency Election.

`campaign(value)` creates `<prefix>/<lease id>` with the session's lease (only if absent), then
waits until every key under the prefix with a lower create revision is gone: candidates form a
queue, each watching only its predecessor (no thundering herd). The leader is whoever holds the
oldest key. `proclaim` and `resign` succeed only while our key still has the create revision we
campaigned with; `fence()` gives that same comparison for the caller's own transactions, so a
deposed leader can never write (docs/metadata.md).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Final

import structlog
from etcd3aio import Etcd3Client, SortOrder, SortTarget, prefix_range_end
from etcd3aio.kv import KVService

from tidelog.server_common.etcd.session import Session

__all__ = ["DeathWatch", "Election", "Leader", "NotLeaderError"]

log = structlog.get_logger(__name__)

EVENT_DELETE: Final = 1
DeathWatch = Callable[[bytes], Awaitable[None]]  # given a candidate's value: returns once it is dead


class NotLeaderError(Exception):
    """Our election key is gone or was replaced: we are not (or no longer) the leader."""


class Leader:
    def __init__(self, key: bytes, value: bytes, create_revision: int) -> None:
        self.key = key
        self.value = value
        self.create_revision = create_revision


class Election:
    def __init__(self, session: Session, prefix: str) -> None:
        self.session = session
        self.client: Etcd3Client = session.client
        self.prefix = prefix.rstrip("/").encode() + b"/"
        self.key = self.prefix + f"{session.lease_id:016x}".encode()
        self.create_revision = 0

    @property
    def _kv(self) -> KVService:
        assert self.client.kv is not None
        return self.client.kv

    def fence(self) -> Any:
        """A txn Compare that holds only while we are still the elected leader."""
        assert self.create_revision, "campaign first"
        return KVService.txn_compare_create_revision(self.key, self.create_revision)

    async def campaign(self, value: bytes, *, predecessor_dead: DeathWatch | None = None) -> None:
        """Block until elected (or raise NotLeaderError when the session ends first).

        `predecessor_dead(value)`, when given, returns once the candidate ahead of us (the leader,
        when we are next) is known to be dead: its lease is then revoked rather than left to
        expire, so its key goes now instead of a session TTL later. Revoking a live one's lease
        is safe (its fenced writes fail from then on, as after any expiry) but costs a failover:
        the watch must be sure."""
        response = await self._kv.txn(
            compare=[KVService.txn_compare_create_revision(self.key, 0)],
            success=[KVService.txn_op_put(self.key, value, lease=self.session.lease_id)],
            failure=[KVService.txn_op_get(self.key)],
        )
        if response.succeeded:
            self.create_revision = int(response.header.revision)
        else:
            self.create_revision = int(response.responses[0].response_range.kvs[0].create_revision)
            await self.proclaim(value)
        while True:
            predecessor, revision = await self._predecessor()
            if predecessor is None:
                return
            await self._wait_deleted(
                predecessor.key, revision, predecessor_dead and predecessor_dead(predecessor.value)
            )

    async def _predecessor(self) -> tuple[Any | None, int]:
        """The newest candidate key-value older than ours, and the revision the answer is valid at."""
        listing = await self._kv.get(
            self.prefix,
            prefix_range_end(self.prefix),
            sort_order=SortOrder.ASCEND,
            sort_target=SortTarget.CREATE,
        )
        older = [kv for kv in listing.kvs if kv.create_revision < self.create_revision]
        if not any(kv.key == self.key for kv in listing.kvs):
            raise NotLeaderError("our campaign key vanished (session lost)")
        return (older[-1] if older else None), int(listing.header.revision)

    async def _wait_deleted(self, key: bytes, revision: int, dead: Awaitable[None] | None) -> None:
        assert self.client.watch is not None
        watching = self._first_delete(self.client.watch.watch(key, start_revision=revision + 1))
        session_end = asyncio.ensure_future(self.session.done.wait())
        deleted = asyncio.ensure_future(watching)
        died = asyncio.ensure_future(dead) if dead is not None else None
        waits = {session_end, deleted} | ({died} if died is not None else set())
        try:
            finished, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in waits:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        if session_end in finished:
            raise NotLeaderError("session ended while campaigning")
        if died is None or died not in finished:
            return
        if (error := died.exception()) is not None:  # the watch broke: the lease's expiry decides
            log.warning("election_death_watch_failed", key=key.decode(), error=repr(error))
            await self._wait_deleted(key, revision, None)
            return
        lease_id = int(key.rsplit(b"/", 1)[1], 16)  # candidate keys are named by their lease
        log.warning("election_predecessor_dead_lease_revoked", key=key.decode(), lease=hex(lease_id))
        assert self.client.lease is not None
        with contextlib.suppress(Exception):  # already expired, or etcd slow: the watch decides
            await self.client.lease.revoke(lease_id, timeout=2)

    @staticmethod
    async def _first_delete(events: AsyncIterator[Any]) -> None:
        async for response in events:
            if any(event.type == EVENT_DELETE for event in response.events):
                return

    async def proclaim(self, value: bytes) -> None:
        """Change the value leaders publish (e.g. our endpoint), only while we hold our key."""
        response = await self._kv.txn(
            compare=[self.fence()],
            success=[KVService.txn_op_put(self.key, value, lease=self.session.lease_id)],
        )
        if not response.succeeded:
            raise NotLeaderError("cannot proclaim: our election key changed")

    async def resign(self) -> None:
        if self.create_revision:
            await self._kv.txn(compare=[self.fence()], success=[KVService.txn_op_delete(self.key)])
            self.create_revision = 0

    async def leader(self) -> Leader | None:
        listing = await self._kv.get(
            self.prefix,
            prefix_range_end(self.prefix),
            sort_order=SortOrder.ASCEND,
            sort_target=SortTarget.CREATE,
            limit=1,
        )
        if not listing.kvs:
            return None
        first = listing.kvs[0]
        return Leader(bytes(first.key), bytes(first.value), int(first.create_revision))
