"""A prefix of etcd kept in memory and followed: the whole range is read once, then watched from
the revision of that read, so no change between the read and the watch is missed. A broken watch
(etcd restarted, compacted, unreachable) is answered by reading the range again.

Each change calls `on_change` with the whole current contents, keyed by the key's bytes; the
callback builds whatever index it serves from it (ACLs, credentials, quotas are small).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Final

import structlog
from etcd3aio import Etcd3Client, prefix_range_end

__all__ = ["WatchedPrefix"]

log = structlog.get_logger(__name__)

RETRY_BACKOFF_S: Final = 0.5
EVENT_PUT: Final = 0  # etcd's mvccpb Event.EventType


class WatchedPrefix:
    def __init__(self, etcd: Etcd3Client, prefix: str, on_change: Callable[[dict[bytes, bytes]], None]) -> None:
        self.etcd = etcd
        self.prefix = prefix.encode()
        self.on_change = on_change
        self.contents: dict[bytes, bytes] = {}
        self.loaded = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self, *, wait_s: float = 10.0) -> None:
        """Follow the prefix in the background; returns once the first read is applied."""
        self._task = asyncio.create_task(self._run(), name=f"watch {self.prefix.decode()}")
        await asyncio.wait_for(self.loaded.wait(), wait_s)

    async def _run(self) -> None:
        range_end = prefix_range_end(self.prefix)
        while True:
            try:
                assert self.etcd.kv is not None and self.etcd.watch is not None
                response = await self.etcd.kv.get(self.prefix, range_end)
                self.contents = {bytes(kv.key): bytes(kv.value) for kv in response.kvs}
                self.on_change(dict(self.contents))
                self.loaded.set()
                revision = int(response.header.revision)
                async for update in self.etcd.watch.watch(self.prefix, range_end, start_revision=revision + 1):
                    if not update.events:
                        continue
                    for event in update.events:
                        if event.type == EVENT_PUT:
                            self.contents[bytes(event.kv.key)] = bytes(event.kv.value)
                        else:
                            self.contents.pop(bytes(event.kv.key), None)
                    self.on_change(dict(self.contents))
            except asyncio.CancelledError:
                raise
            except Exception as error:  # etcd away or the watch compacted: read everything again
                log.info("etcd_watch_restarting", prefix=self.prefix.decode(), error=str(error)[:200])
            await asyncio.sleep(RETRY_BACKOFF_S)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
