"""The consumer with manual assignment: assign, seek, poll (consumer groups come with the coordinator).

`poll()` sends one Fetch per leader broker for the assigned partitions, concurrently, and decodes
the stored batches it gets back with the columnar codec. Records before a partition's position
(the first batch may start earlier) are skipped. A partition without a position starts where
`auto.offset.reset` says (earliest, latest, or none: an error). NOT_LEADER_OR_FOLLOWER and
unknown-partition answers refresh the metadata; OFFSET_OUT_OF_RANGE resets the position.
`poll_runs()` is the bulk form: the same records as runs of columns (consumer_records.py), and
`poll_batches()` the stored batches themselves, decoded, per partition, and `poll_stored()` their
bytes as the broker sent them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import ClassVar, Final, TypeVar

import grpc

from tidelog.client.client_logging import get_logger
from tidelog.client.cluster_metadata import ClusterMetadata, TopicPartition
from tidelog.client.connections import Connections, client_id_metadata
from tidelog.client.consumer_records import (
    ConsumerRecord,
    FetchedPartition,
    OffsetRange,
    RecordRun,
    StoredPartition,
    records_of,
    runs_of,
)
from tidelog.client.fetch_sessions import SESSION_ERRORS, ClientFetchSession
from tidelog.client.transactional_reads import committed_batches
from tidelog.common.errors import (
    ErrorCode,
    OffsetOutOfRangeError,
    TidelogError,
    TopicAuthorizationFailedError,
    error_for,
)
from tidelog.common.record.batch import CONTROL_BIT, TRANSACTIONAL_BIT, check_header, decode_batches, iter_headers
from tidelog.common.settings import ConsumerSettings, SecuritySettings
from tidelog.v1 import broker_pb2

__all__ = ["Consumer", "ConsumerRecord", "FetchedPartition", "RecordRun", "StoredPartition"]

log = get_logger(__name__)

EARLIEST: Final = -2
LATEST: Final = -1
READ_UNCOMMITTED: Final = 0  # isolation levels, as the requests carry them
READ_COMMITTED: Final = 1
DEFAULTS: Final = ConsumerSettings.from_configs()  # the registry's (docs/configuration.md)
T = TypeVar("T")


class Consumer:
    # The consumer settings it takes, each as the keyword argument of the config's attribute name
    # (`fetch.max.bytes` → fetch_max_bytes); the group's own are GroupConsumer's.
    CONFIGS: ClassVar[frozenset[str]] = frozenset(
        {
            "auto.offset.reset",
            "isolation.level",
            "fetch.min.bytes",
            "fetch.max.wait.ms",
            "fetch.max.bytes",
            "max.partition.fetch.bytes",
            "request.timeout.ms",
            "retry.backoff.ms",
            "client.id",
        }
    )

    def __init__(
        self,
        bootstrap: Sequence[str],
        *,
        auto_offset_reset: str = DEFAULTS.auto_offset_reset,
        isolation_level: str = DEFAULTS.isolation_level,
        fetch_min_bytes: int = DEFAULTS.fetch_min_bytes,
        fetch_max_wait_ms: int = DEFAULTS.fetch_max_wait_ms,
        fetch_max_bytes: int = DEFAULTS.fetch_max_bytes,
        max_partition_fetch_bytes: int = DEFAULTS.max_partition_fetch_bytes,
        request_timeout_ms: int = DEFAULTS.request_timeout_ms,
        retry_backoff_ms: int = DEFAULTS.retry_backoff_ms,
        connections: Connections | None = None,
        security: SecuritySettings | Mapping[str, object] | None = None,
        client_id: str = "",
    ) -> None:
        # Built once from the registry (an InvalidConfigError names a bad value) and read from here.
        self.settings = ConsumerSettings.from_configs(
            {
                "auto.offset.reset": auto_offset_reset,
                "isolation.level": isolation_level,
                "fetch.min.bytes": fetch_min_bytes,
                "fetch.max.wait.ms": fetch_max_wait_ms,
                "fetch.max.bytes": fetch_max_bytes,
                "max.partition.fetch.bytes": max_partition_fetch_bytes,
                "request.timeout.ms": request_timeout_ms,
                "retry.backoff.ms": retry_backoff_ms,
                "client.id": client_id,
            }
        )
        self.request_timeout_s = self.settings.request_timeout_ms / 1000
        # read_committed (KIP-98): fetch and list offsets below the last stable offset, and drop
        # aborted transactions' batches (transactional_reads.py).
        self.isolation = READ_COMMITTED if self.settings.isolation_level == "read_committed" else READ_UNCOMMITTED
        self.control_batches = False  # keep markers (the coordinators' loads read them); not a config
        self.retry_backoff_s = self.settings.retry_backoff_ms / 1000
        self._backoff_until: dict[str, float] = {}  # endpoints whose last fetch failed
        # The client id travels with every request (client quotas may name it).
        self.connections = connections or Connections(
            security, call_metadata=client_id_metadata(self.settings.client_id)
        )
        self._owns_connections = connections is None
        self.metadata = ClusterMetadata(bootstrap, self.connections, request_timeout_s=self.request_timeout_s)
        self._positions: dict[TopicPartition, int | None] = {}
        self._authorization_error: TidelogError | None = None  # raised by the next poll
        self._paused: set[TopicPartition] = set()
        self.high_watermarks: dict[TopicPartition, int] = {}
        # One fetch in flight per leader broker, sent again as soon as its answer is handled, so a
        # broker that long-polls (nothing new) never holds up the others; a partition is in at most
        # one of them. Any change of assignment or position cancels them all.
        self._in_flight: dict[asyncio.Task[broker_pb2.FetchResponse | None], list[TopicPartition]] = {}
        self._sessions: dict[str, ClientFetchSession] = {}  # by broker endpoint

    async def __aenter__(self) -> Consumer:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def close(self) -> None:
        in_flight = list(self._in_flight)
        self._discard_prefetch()
        # Wait for the cancelled fetches to end: a loop closed right after (asyncio.run, a Spark
        # task's own loop) would otherwise destroy them pending.
        await asyncio.gather(*in_flight, return_exceptions=True)
        if self._owns_connections:
            await self.connections.close()

    # ---- assignment and positions ----------------------------------------------------------

    def _discard_prefetch(self) -> None:
        for task in self._in_flight:
            task.cancel()
        self._in_flight.clear()

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        self._discard_prefetch()
        wanted = set(partitions)
        self._positions = {tp: self._positions.get(tp) for tp in sorted(wanted)}
        self._paused &= wanted

    def assignment(self) -> set[TopicPartition]:
        return set(self._positions)

    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        """Stop fetching these partitions (positions are kept) until `resume`."""
        self._discard_prefetch()
        self._paused |= set(partitions) & set(self._positions)

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        self._paused -= set(partitions)

    def paused(self) -> set[TopicPartition]:
        return set(self._paused)

    def seek(self, partition: TopicPartition, offset: int) -> None:
        if partition not in self._positions:
            raise ValueError(f"{partition} is not assigned")
        if offset < 0:
            raise ValueError("offsets are not negative")
        self._discard_prefetch()
        self._positions[partition] = offset

    def known_position(self, partition: TopicPartition) -> int | None:
        """The position without resolving a reset: None until it is known (or not assigned)."""
        return self._positions.get(partition)

    async def seek_to_beginning(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        await self._reset(list(partitions or self._positions), EARLIEST)

    async def seek_to_end(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        await self._reset(list(partitions or self._positions), LATEST)

    async def position(self, partition: TopicPartition) -> int:
        if self._positions.get(partition) is None:
            await self._reset_missing()
        position = self._positions[partition]
        assert position is not None
        return position

    async def beginning_offsets(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        """Each partition's first offset still in the log (its log start offset), as KafkaConsumer's."""
        return await self.list_offsets(partitions, EARLIEST)

    async def end_offsets(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        """Each partition's end: the offset the next record will get that consumers may read (the
        high watermark; read_committed: the last stable offset), as KafkaConsumer's; reading to
        the end means reading up to it."""
        return await self.list_offsets(partitions, LATEST)

    async def list_offsets(
        self, partitions: Sequence[TopicPartition], timestamp: int, *, read_committed: bool | None = None
    ) -> dict[TopicPartition, int]:
        """Offsets by timestamp (ms since the epoch), or EARLIEST / LATEST (tidelog.client exports
        both), from each partition's leader; below the last stable offset with `read_committed`
        (default: as the consumer's isolation.level)."""
        isolation = self.isolation if read_committed is None else READ_COMMITTED if read_committed else READ_UNCOMMITTED
        return await self._ask_offsets(partitions, timestamp, isolation, lambda result: int(result.offset))

    async def offset_ranges(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, OffsetRange]:
        """Each partition's log start, high watermark and last stable offset, in one ListOffsets
        round (a monitoring view asked three rounds for them: at 10,000 partitions, every 5 s, half
        of an idle broker's CPU)."""
        return await self._ask_offsets(
            partitions,
            LATEST,
            READ_UNCOMMITTED,
            lambda result: OffsetRange(result.log_start_offset, result.high_watermark, result.last_stable_offset),
        )

    async def _ask_offsets(
        self,
        partitions: Sequence[TopicPartition],
        timestamp: int,
        isolation: int,
        take: Callable[[broker_pb2.ListOffsetsPartitionResult], T],
    ) -> dict[TopicPartition, T]:
        """ListOffsets to each partition's leader, `take` of each answer; retried with the
        metadata refreshed for partitions without one."""
        found: dict[TopicPartition, T] = {}
        for attempt in range(5):
            by_leader: dict[str, list[TopicPartition]] = {}
            for tp in partitions:
                if tp in found:
                    continue
                await self.metadata.partitions_of(tp.topic)
                try:
                    by_leader.setdefault(self.metadata.leader_endpoint(tp.topic, tp.partition), []).append(tp)
                except TidelogError:
                    continue
            for endpoint, tps in by_leader.items():
                request = broker_pb2.ListOffsetsRequest(
                    partitions=[
                        broker_pb2.ListOffsetsPartition(topic=tp.topic, partition=tp.partition, timestamp=timestamp)
                        for tp in tps
                    ],
                    isolation_level=isolation,
                )
                try:
                    response = await self.connections.broker(endpoint).ListOffsets(
                        request, timeout=self.request_timeout_s
                    )
                except grpc.aio.AioRpcError:
                    continue
                for result in response.partitions:
                    if not result.error_code:
                        found[TopicPartition(result.topic, result.partition)] = take(result)
            if len(found) == len(set(partitions)):
                return found
            await asyncio.sleep(self.retry_backoff_s * (attempt + 1))  # retry.backoff.ms, growing
            await self.metadata.refresh()
        missing = sorted(set(partitions) - set(found))
        raise error_for(ErrorCode.LEADER_NOT_AVAILABLE, f"no offsets for {', '.join(map(str, missing))}")

    async def _reset(self, partitions: list[TopicPartition], timestamp: int) -> None:
        self._discard_prefetch()
        offsets = await self.list_offsets(partitions, timestamp)
        for tp, offset in offsets.items():
            self._positions[tp] = offset

    async def _reset_missing(self) -> None:
        missing = [tp for tp, position in self._positions.items() if position is None]
        if not missing:
            return
        if self.settings.auto_offset_reset == "none":
            raise OffsetOutOfRangeError(f"no position for {', '.join(map(str, missing))} and auto.offset.reset=none")
        await self._reset(missing, EARLIEST if self.settings.auto_offset_reset == "earliest" else LATEST)

    # ---- fetching --------------------------------------------------------------------------

    async def poll_batches(self, timeout_ms: int = 1000) -> dict[TopicPartition, FetchedPartition]:
        """Decoded batches per partition, as stored: the first may hold records below the position."""
        return {
            tp: FetchedPartition(stored.start_offset, decode_batches(stored.record_batches, verify_crc=False))
            for tp, stored in (await self.poll_stored(timeout_ms)).items()
        }

    async def poll_stored(self, timeout_ms: int = 1000) -> dict[TopicPartition, StoredPartition]:
        """The fetched batches' bytes per partition, undecoded but checked (framing and CRC, before
        the position moves past them): the first may hold records below the position."""
        await self._reset_missing()
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            result = await self._fetch_once(
                max(0, min(self.settings.fetch_max_wait_ms, int((deadline - time.monotonic()) * 1000)))
            )
            if result or time.monotonic() >= deadline:
                return result

    async def poll_runs(self, timeout_ms: int = 1000) -> list[RecordRun]:
        """The records after each position, as runs of columns (a run per stored batch)."""
        return runs_of(await self.poll_batches(timeout_ms))

    async def poll(self, timeout_ms: int = 1000) -> list[ConsumerRecord]:
        return records_of(await self.poll_runs(timeout_ms))

    async def _start_fetches(self, max_wait_ms: int) -> None:
        """Send a fetch to every leader that has none in flight, for its partitions not in flight."""
        busy = {tp for partitions in self._in_flight.values() for tp in partitions}
        now = time.monotonic()
        busy_endpoints = {task.get_name() for task in self._in_flight}
        busy_endpoints |= {endpoint for endpoint, until in self._backoff_until.items() if until > now}
        by_leader: dict[str, list[TopicPartition]] = {}
        described: dict[str, bool] = {}  # topic → its metadata is known (looked up once per call, not per partition)
        for tp, position in self._positions.items():
            if tp in busy or position is None or tp in self._paused:
                continue
            if tp.topic not in described:
                described[tp.topic] = await self._described(tp.topic)
            if not described[tp.topic]:
                continue
            try:
                endpoint = self.metadata.leader_endpoint(tp.topic, tp.partition)
            except TidelogError:
                continue
            if endpoint not in busy_endpoints:
                by_leader.setdefault(endpoint, []).append(tp)
        for endpoint, partitions in by_leader.items():
            task = asyncio.create_task(self._fetch_from(endpoint, partitions, max_wait_ms), name=endpoint)
            self._in_flight[task] = partitions

    async def _described(self, topic: str) -> bool:
        """Whether the topic's metadata is known (looked up if not); a refusal to describe it is
        raised by the next poll."""
        try:
            await self.metadata.partitions_of(topic)
        except TidelogError:
            if self.metadata.topic_errors.get(topic) == ErrorCode.TOPIC_AUTHORIZATION_FAILED:
                self._authorization_error = TopicAuthorizationFailedError(f"not authorised to describe topic {topic!r}")
            return False
        return True

    async def _fetch_once(self, max_wait_ms: int) -> dict[TopicPartition, StoredPartition]:
        if self._authorization_error is not None:
            # As Kafka's consumer: poll() raises while a partition may not be read (records of
            # other partitions that came with it were returned by the poll before).
            error, self._authorization_error = self._authorization_error, None
            raise error
        await self._start_fetches(self.settings.fetch_max_wait_ms)
        if not self._in_flight:
            await asyncio.sleep(min(max_wait_ms, 100) / 1000)
            await self._refresh_quietly()
            return {}
        done, _ = await asyncio.wait(
            list(self._in_flight), timeout=max_wait_ms / 1000, return_when=asyncio.FIRST_COMPLETED
        )
        batches_by_partition: dict[TopicPartition, StoredPartition] = {}
        refresh = False
        for task in done:
            if self._in_flight.pop(task, None) is None:
                # Discarded while this poll waited on it (an assign or a rebalance's new
                # assignment, seek): cancelled, and what it fetched belongs to the old positions.
                continue
            response = task.result()
            if response is None:
                refresh = True
                continue
            for result in response.partitions:
                tp = TopicPartition(result.topic, result.partition)
                if tp in self._positions:
                    refresh |= self._handle_result(tp, result, batches_by_partition)
        if refresh:
            await self._refresh_quietly()
        await self._start_fetches(self.settings.fetch_max_wait_ms)  # the brokers work while the caller processes
        return batches_by_partition

    def _handle_result(
        self,
        tp: TopicPartition,
        result: broker_pb2.FetchPartitionResult,
        batches_by_partition: dict[TopicPartition, StoredPartition],
    ) -> bool:
        """Apply one partition's fetch result; True when metadata should be refreshed."""
        if result.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
            log.info("offset_out_of_range", partition=str(tp), position=self._positions.get(tp))
            self._positions[tp] = None
            return False
        if result.error_code in (ErrorCode.TOPIC_AUTHORIZATION_FAILED, ErrorCode.CLUSTER_AUTHORIZATION_FAILED):
            self._authorization_error = error_for(result.error_code, result.error_message or f"may not read {tp}")
            return False
        if result.error_code:
            return True
        self.high_watermarks[tp] = result.high_watermark
        position = self._positions.get(tp)
        if not result.record_batches or position is None:
            return False
        data = result.record_batches  # once: each read of a protobuf bytes field is a copy
        last = None
        transactional = 0
        for at, header in iter_headers(data):
            # Checked here, so a corrupt batch raises before the position moves past it.
            last = check_header(data, at, header)
            transactional |= last.attributes & (CONTROL_BIT | TRANSACTIONAL_BIT)
        assert last is not None, "a non-empty fetch holds a batch"
        if transactional and not self.control_batches:  # markers (read_committed: aborts too) are not returned
            aborted = [(entry.producer_id, entry.first_offset) for entry in result.aborted_transactions]
            data = committed_batches(data, aborted, read_committed=self.isolation == READ_COMMITTED)
        if data:
            batches_by_partition[tp] = StoredPartition(position, data)
        self._positions[tp] = max(position, last.next_offset)
        return False

    async def _fetch_from(
        self, endpoint: str, partitions: list[TopicPartition], max_wait_ms: int
    ) -> broker_pb2.FetchResponse | None:
        """One fetch from a broker, in its incremental fetch session (fetch_sessions.py)."""
        wanted = {tp: position for tp in partitions if (position := self._positions.get(tp)) is not None}
        session = self._sessions.setdefault(endpoint, ClientFetchSession())
        listed, forgotten = session.changes(wanted)
        request = broker_pb2.FetchRequest(
            replica_id=-1,
            max_wait_ms=max_wait_ms,
            min_bytes=self.settings.fetch_min_bytes,
            max_bytes=self.settings.fetch_max_bytes,
            partitions=[
                broker_pb2.FetchPartition(
                    topic=tp.topic,
                    partition=tp.partition,
                    fetch_offset=wanted[tp],
                    partition_max_bytes=self.settings.max_partition_fetch_bytes,
                )
                for tp in listed
            ],
            incremental=True,
            isolation_level=self.isolation,
            session_id=session.session_id,
            session_epoch=session.epoch,
            forgotten=[broker_pb2.FetchPartition(topic=tp.topic, partition=tp.partition) for tp in forgotten],
        )
        try:
            response: broker_pb2.FetchResponse = await self.connections.broker(endpoint).Fetch(
                request, timeout=self.request_timeout_s + max_wait_ms / 1000
            )
        except grpc.aio.AioRpcError as error:
            session.reset()
            log.info("fetch_failed", endpoint=endpoint, code=error.code().name)
            self._backoff_until[endpoint] = time.monotonic() + self.retry_backoff_s
            return None
        except BaseException:  # cancelled (a seek, an assign, close): what the broker took is unknown
            session.reset()
            raise
        if response.error_code in SESSION_ERRORS:  # lost or out of step: the next fetch opens another
            log.info("fetch_session_reset", endpoint=endpoint, error=ErrorCode(response.error_code).name)
            session.reset()
            return broker_pb2.FetchResponse()
        if not response.error_code:
            session.answered(response, {tp: wanted[tp] for tp in listed}, forgotten)
        else:
            session.reset()
        if response.throttle_time_ms:  # over a quota: no fetch to this broker until it passes (KIP-219)
            self._backoff_until[endpoint] = time.monotonic() + response.throttle_time_ms / 1000
        return response

    async def _refresh_quietly(self) -> None:
        try:
            await self.metadata.refresh()
        except ConnectionError as error:
            log.info("metadata_refresh_failed", error=str(error))
