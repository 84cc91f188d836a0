"""Synchronous facades over the asyncio clients, for scripts and code without an event loop.

Every facade of a process shares one background thread running one event loop (gRPC's asyncio
layer serves one loop per process: facades on loops of their own raced at close, a closed loop
still handed gRPC completions); every call is submitted to it and waited for with a timeout. The
thread starts with the first facade and stops when the last one closes. The async clients stay
the one implementation.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine, Mapping, Sequence
from concurrent.futures import Future
from typing import Any, TypeVar

from tidelog.client.admin import AdminClient, TopicDescription
from tidelog.client.cluster_metadata import TopicPartition
from tidelog.client.consumer import Consumer, ConsumerRecord
from tidelog.client.producer import Producer, RecordMetadata
from tidelog.common.errors import TidelogError
from tidelog.common.record.batch import Headers

__all__ = ["SyncAdminClient", "SyncConsumer", "SyncProducer"]

T = TypeVar("T")
CALL_TIMEOUT_S = 300.0


class _LoopThread:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="tidelog-client-loop", daemon=True)
        self.thread.start()
        self.users = 0  # facades open on it

    def run(self, coroutine: Coroutine[Any, Any, T], timeout_s: float = CALL_TIMEOUT_S) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout_s)

    def stop(self) -> None:
        """A facade closed: the last one stops the loop (after letting gRPC's last callbacks run)."""
        with _shared_lock:
            self.users -= 1
            if self.users > 0:
                return
            _shared.pop("loop", None)
        self.run(asyncio.sleep(0.05))  # completions of the just-closed channels are handled, not orphaned
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()


_shared: dict[str, _LoopThread] = {}  # "loop" → the process's client loop, while a facade is open
_shared_lock = threading.Lock()


def _loop_thread() -> _LoopThread:
    """The process's client loop, started if none runs; each caller must `stop()` it once."""
    with _shared_lock:
        shared = _shared.get("loop")
        if shared is None:
            shared = _shared["loop"] = _LoopThread()
        shared.users += 1
        return shared


class SyncAdminClient:
    def __init__(self, bootstrap: Sequence[str], **options: Any) -> None:
        self._loop = _loop_thread()
        self._admin = self._loop.run(_make(AdminClient, bootstrap, **options))

    def create_topic(
        self,
        name: str,
        num_partitions: int = -1,
        replication_factor: int = -1,
        configs: Mapping[str, str] | None = None,
    ) -> None:
        self._loop.run(self._admin.create_topic(name, num_partitions, replication_factor, configs))

    def delete_topics(self, names: Sequence[str]) -> dict[str, TidelogError | None]:
        return self._loop.run(self._admin.delete_topics(names))

    def list_topics(self) -> list[str]:
        return self._loop.run(self._admin.list_topics())

    def describe_topics(self, names: Sequence[str] = ()) -> dict[str, TopicDescription | TidelogError]:
        return self._loop.run(self._admin.describe_topics(names))

    def close(self) -> None:
        self._loop.run(self._admin.close())
        self._loop.stop()


class SyncProducer:
    def __init__(self, bootstrap: Sequence[str], **options: Any) -> None:
        self._loop = _loop_thread()
        self._producer = self._loop.run(_make(Producer, bootstrap, **options))

    def send(
        self,
        topic: str,
        value: bytes | None,
        *,
        key: bytes | None = None,
        partition: int | None = None,
        headers: Headers | None = None,
    ) -> Future[RecordMetadata]:
        """Queue a record; the returned future resolves to its RecordMetadata (or its error)."""

        async def send_and_wait() -> RecordMetadata:
            delivery = await self._producer.send(topic, value, key=key, partition=partition, headers=headers)
            return await delivery

        return asyncio.run_coroutine_threadsafe(send_and_wait(), self._loop.loop)

    def send_batch(self, topic: str, values: Sequence[bytes | None], **options: Any) -> list[tuple[int, int, int]]:
        async def send_and_wait() -> list[tuple[int, int, int]]:
            return await (await self._producer.send_batch(topic, values, **options))

        return self._loop.run(send_and_wait())

    def flush(self) -> None:
        self._loop.run(self._producer.flush())

    def close(self) -> None:
        self._loop.run(self._producer.close())
        self._loop.stop()


class SyncConsumer:
    def __init__(self, bootstrap: Sequence[str], **options: Any) -> None:
        self._loop = _loop_thread()
        self._consumer = self._loop.run(_make(Consumer, bootstrap, **options))

    def assign(self, partitions: Sequence[TopicPartition]) -> None:
        self._loop.loop.call_soon_threadsafe(self._consumer.assign, list(partitions))
        self._loop.run(asyncio.sleep(0))  # the assignment is applied before the next call

    def seek(self, partition: TopicPartition, offset: int) -> None:
        async def seek() -> None:
            self._consumer.seek(partition, offset)

        self._loop.run(seek())

    def seek_to_beginning(self, partitions: Sequence[TopicPartition] | None = None) -> None:
        self._loop.run(self._consumer.seek_to_beginning(partitions))

    def position(self, partition: TopicPartition) -> int:
        return self._loop.run(self._consumer.position(partition))

    def beginning_offsets(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        return self._loop.run(self._consumer.beginning_offsets(partitions))

    def end_offsets(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        return self._loop.run(self._consumer.end_offsets(partitions))

    def poll(self, timeout_ms: int = 1000) -> list[ConsumerRecord]:
        return self._loop.run(self._consumer.poll(timeout_ms), timeout_s=timeout_ms / 1000 + CALL_TIMEOUT_S)

    def close(self) -> None:
        self._loop.run(self._consumer.close())
        self._loop.stop()


async def _make(factory: Callable[..., T], bootstrap: Sequence[str], **options: Any) -> T:
    """Clients create asyncio objects: build them on the facade's own loop."""
    return factory(bootstrap, **options)
