"""REST consumer instances: a `GroupConsumer` per instance, held by the gateway that created it.

An instance either subscribes (the group assigns its partitions) or is assigned partitions by hand;
REST Proxy's rule, kept here, is one or the other (40903). Requests to one instance run one at a
time (its lock), as the consumer beneath is not meant for concurrent polls. An instance idle for
`consumer.instance.timeout.ms` is closed — it leaves its group — and forgotten; so is its etcd
registration (instance_registry.py), through which any gateway replica finds it.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import itertools
import re
import time
from collections.abc import Iterable, Mapping
from typing import Any

import orjson
import structlog

from tidelog.client import GroupConsumer, TopicPartition
from tidelog.client.connections import Connections
from tidelog.client.consumer_records import RecordRun, first_offsets, next_offsets
from tidelog.common.errors import TidelogError
from tidelog.gateway.embedded_format import EmbeddedFormat
from tidelog.gateway.record_json import binary_records_json, records_as_objects
from tidelog.gateway.rest_errors import (
    ILLEGAL_STATE,
    KAFKA_ERROR,
    PARTITION_NOT_FOUND,
    UNPROCESSABLE,
    RestError,
    from_tidelog,
)

__all__ = ["ConsumerInstance", "Mode"]

log = structlog.get_logger(__name__)


class Mode(enum.Enum):
    NONE = "none"
    SUBSCRIBED = "subscribed"
    ASSIGNED = "assigned"


class ConsumerInstance:
    def __init__(
        self,
        group: str,
        name: str,
        embedded: EmbeddedFormat,
        principal: str,
        *,
        bootstrap: list[str],
        connections: Connections,
        auto_offset_reset: str,
        auto_commit: bool,
        isolation_level: str = "read_uncommitted",
        fetch_min_bytes: int,
        request_timeout_ms: int,
        instance_timeout_ms: int,
    ) -> None:
        self.group = group
        self.name = name
        self.format = embedded
        self.principal = principal
        self.request_timeout_ms = request_timeout_ms
        self.consumer = GroupConsumer(
            bootstrap,
            group,
            client_id=f"rest-{name}",
            auto_offset_reset=auto_offset_reset,
            isolation_level=isolation_level,
            enable_auto_commit=auto_commit,
            # A REST client polls at its own pace: it stays a member while the instance lives.
            max_poll_interval_ms=instance_timeout_ms,
            max_poll_records=100_000,
            connections=connections,
            fetch_min_bytes=fetch_min_bytes,
        )
        self.mode = Mode.NONE
        self.topics: list[str] = []
        self.pattern: str | None = None
        self.lock = asyncio.Lock()
        self.last_used = time.monotonic()
        self._fetched: dict[TopicPartition, int] = {}  # assigned mode: next offset after what was returned
        self._last_commit = time.monotonic()

    def touch(self) -> None:
        self.last_used = time.monotonic()

    # ---- subscription and assignment -------------------------------------------------------

    def subscribe(self, topics: list[str], pattern: str | None) -> None:
        """Subscribe, or replace the subscription (as KafkaConsumer.subscribe, which v2 calls): the
        member rejoins its group with the new topics at its next poll."""
        if self.mode is Mode.ASSIGNED:
            raise RestError(
                ILLEGAL_STATE, "Illegal state: subscription to topics is not allowed with assigned partitions"
            )
        try:
            self.consumer.subscribe(topics, pattern=pattern)
        except re.error as error:
            raise RestError(UNPROCESSABLE, f"topic_pattern is not a valid regular expression: {error}") from None
        self.mode, self.topics, self.pattern = Mode.SUBSCRIBED, sorted(set(topics)), pattern

    async def unsubscribe(self) -> None:
        if self.mode is Mode.SUBSCRIBED:
            await self.consumer.unsubscribe()
        self.mode, self.topics, self.pattern = Mode.NONE, [], None

    async def assign(self, partitions: Iterable[TopicPartition]) -> None:
        if self.mode is Mode.SUBSCRIBED:
            raise RestError(ILLEGAL_STATE, "Illegal state: partition assignment is not allowed with a subscription")
        wanted = set(partitions)
        for tp in wanted:
            try:
                count = len(await self.consumer.metadata.partitions_of(tp.topic))
            except TidelogError as error:
                raise from_tidelog(error) from None
            if tp.partition >= count:
                raise RestError(PARTITION_NOT_FOUND, f"topic {tp.topic!r} has no partition {tp.partition}")
        self.consumer.consumer.assign(wanted)
        self._fetched = {tp: offset for tp, offset in self._fetched.items() if tp in wanted}
        self.mode = Mode.ASSIGNED if wanted else Mode.NONE

    def assignment(self) -> set[TopicPartition]:
        if self.mode is Mode.ASSIGNED:
            return self.consumer.consumer.assignment()
        return self.consumer.assignment()

    # ---- records ---------------------------------------------------------------------------

    async def records(self, timeout_ms: int, max_bytes: int) -> list[RecordRun]:
        """Long-poll: wait up to `timeout_ms` for records (joining the group counts against it)."""
        if self.mode is Mode.NONE:
            raise RestError(ILLEGAL_STATE, "Illegal state: the consumer is neither subscribed nor assigned partitions")
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            remaining_ms = max(int((deadline - time.monotonic()) * 1000), 0)
            try:
                if self.mode is Mode.SUBSCRIBED:
                    got = await self.consumer.poll_runs(remaining_ms)
                else:
                    got = await self.consumer.consumer.poll_runs(remaining_ms)
            except TidelogError as error:
                raise from_tidelog(error) from None
            if got or remaining_ms == 0:
                break
        kept = self._within(got, max_bytes)
        if self.mode is Mode.ASSIGNED:
            self._fetched.update(next_offsets(kept))
            consumer = self.consumer
            if (
                consumer.settings.enable_auto_commit
                and time.monotonic() - self._last_commit >= consumer.settings.auto_commit_interval_ms / 1000
            ):
                self._last_commit = time.monotonic()
                consumer.commit_async(dict(self._fetched))
        return kept

    def _within(self, runs: list[RecordRun], max_bytes: int) -> list[RecordRun]:
        """The records whose keys and values fit in `max_bytes` (at least one); the consumer is
        moved back to the first record left out of each partition, so none is skipped."""
        kept, left = split_at_bytes(runs, max_bytes)
        if left:
            self._rewind(left)
        return kept

    def _rewind(self, runs: list[RecordRun]) -> None:
        """Move back to the first of these records in each partition: the next poll returns them."""
        for tp, offset in first_offsets(runs).items():
            self.seek(tp, offset)

    def render_json(self, runs: list[RecordRun]) -> bytes:
        """The records GET's body (binary written from the columns: record_json.py)."""
        if self.format is EmbeddedFormat.BINARY:
            return binary_records_json(runs)
        return orjson.dumps(self.render(runs))

    def render(self, runs: list[RecordRun]) -> list[dict[str, Any]]:
        """Records as JSON objects; a record this format cannot give is left for the next poll."""
        try:
            return records_as_objects(runs, self.format)
        except ValueError as error:  # not JSON although the instance reads json: leave it for another reader
            self._rewind(runs)
            raise RestError(
                KAFKA_ERROR, f"a record is not JSON, which this json consumer cannot return: {error}"
            ) from None

    # ---- positions and offsets -------------------------------------------------------------

    def _owned(self, tp: TopicPartition) -> None:
        if tp not in self.assignment():
            raise RestError(ILLEGAL_STATE, f"Illegal state: {tp} is not assigned to this consumer")

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self._owned(tp)
        if self.mode is Mode.SUBSCRIBED:
            self.consumer.seek(tp, offset)
        else:
            self.consumer.consumer.seek(tp, offset)
            self._fetched[tp] = offset

    async def seek_to(self, partitions: list[TopicPartition], *, end: bool) -> None:
        for tp in partitions:
            self._owned(tp)
        try:
            offsets = await self.consumer.consumer.list_offsets(partitions, -1 if end else -2)
        except TidelogError as error:
            raise from_tidelog(error) from None
        for tp, offset in offsets.items():
            self.seek(tp, offset)

    async def commit(self, offsets: Mapping[TopicPartition, int] | None) -> None:
        """Commit `offsets` (REST Proxy's: each the last record processed, so +1 is stored), or
        everything returned so far."""
        if offsets is not None:
            wanted: dict[TopicPartition, int] | None = {tp: offset + 1 for tp, offset in offsets.items()}
        else:
            wanted = dict(self._fetched) if self.mode is Mode.ASSIGNED else None
        try:
            await self.consumer.commit(wanted)
        except TidelogError as error:
            raise from_tidelog(error) from None

    async def committed(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int | None]:
        try:
            return await self.consumer.committed(partitions)
        except TidelogError as error:
            raise from_tidelog(error) from None

    async def close(self) -> None:
        if self.mode is Mode.ASSIGNED and self.consumer.settings.enable_auto_commit and self._fetched:
            with contextlib.suppress(TidelogError):
                await self.consumer.commit(dict(self._fetched))
        await self.consumer.close()
        log.info("consumer_instance_closed", group=self.group, instance=self.name)


def split_at_bytes(runs: list[RecordRun], max_bytes: int) -> tuple[list[RecordRun], list[RecordRun]]:
    """The first records whose keys and values together fit in `max_bytes` (one at least), and
    the rest. Whole runs are measured in bulk; only the run that crosses the limit record by record."""
    total = 0
    for index, run in enumerate(runs):
        size = run.payload_bytes()
        if total + size <= max_bytes:
            total += size
            continue
        sizes = itertools.accumulate(map(_payload, run.keys, run.values), initial=total)
        fit = sum(1 for _ in itertools.takewhile(max_bytes.__ge__, sizes)) - 1  # (the initial total fits)
        if index == 0 and fit == 0:
            fit = 1  # a lone record above the limit: the one a response always holds
        if fit == 0:
            return runs[:index], runs[index:]
        if fit == len(run):  # (that lone record was all its run held)
            return runs[:1], runs[1:]
        head, rest = run.split(fit)
        return [*runs[:index], head], [rest, *runs[index + 1 :]]
    return runs, []


def _payload(key: bytes | None, value: bytes | None) -> int:
    return (0 if key is None else len(key)) + (0 if value is None else len(value))
