"""The group consumer: `subscribe` and let the group coordinator share partitions among members.

As Kafka's consumer: the coordinator (found through any broker, FindCoordinator) runs membership;
the leader member runs the assignor (assignors.py) and hands the result back in SyncGroup.
Rebalances happen inside `poll()`: on_partitions_revoked before rejoining (eager assignors revoke
everything, cooperative-sticky only what moves), on_partitions_assigned after. A background task
heartbeats every `heartbeat.interval.ms`; it learns of rebalances (REBALANCE_IN_PROGRESS) and of a
lost membership (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION: on_partitions_lost). A member that does not
call `poll()` within `max.poll.interval.ms` leaves the group, as in Kafka. Offsets: committed to the
coordinator (`commit`, `commit_async`, `enable.auto.commit`), read back with `committed`; a newly
assigned partition starts at its committed offset, else by `auto.offset.reset`.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import ClassVar, Final

from tidelog.client.assignors import (
    ASSIGNORS,
    Subscription,
    decode_assignment,
)
from tidelog.client.client_logging import get_logger
from tidelog.client.cluster_metadata import TopicPartition
from tidelog.client.connections import Connections, client_id_metadata
from tidelog.client.consumer import Consumer
from tidelog.client.consumer_records import ConsumerRecord, RecordRun, first_offsets, next_offsets, records_of, take
from tidelog.client.coordinator_link import CoordinatorLink
from tidelog.client.group_protocol import GroupProtocol
from tidelog.client.membership import Membership, MemberState, RebalanceListener
from tidelog.client.missing_topics import MissingTopics
from tidelog.client.stall_watch import StallWatch
from tidelog.common.errors import ErrorCode, RemoteError, TidelogError, error_for
from tidelog.common.settings import ConsumerSettings, SecuritySettings
from tidelog.v1 import coordinator_pb2

__all__ = ["GroupConsumer", "RebalanceListener"]

DEFAULTS: Final = ConsumerSettings.from_configs()  # the registry's (docs/configuration.md)
log = get_logger(__name__)

REJOIN_CODES = {ErrorCode.REBALANCE_IN_PROGRESS}
LOST_CODES = {ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION, ErrorCode.FENCED_INSTANCE_ID}


class GroupConsumer:
    # Every consumer setting, as the keyword of its attribute name (fetch ones go to its Consumer).
    CONFIGS: ClassVar[frozenset[str]] = frozenset(definition.name for definition in ConsumerSettings.DEFINITIONS)

    def __init__(
        self,
        bootstrap: Sequence[str],
        group_id: str,
        *,
        client_id: str = DEFAULTS.client_id,
        group_instance_id: str = DEFAULTS.group_instance_id,
        session_timeout_ms: int = DEFAULTS.session_timeout_ms,
        heartbeat_interval_ms: int = DEFAULTS.heartbeat_interval_ms,
        max_poll_interval_ms: int = DEFAULTS.max_poll_interval_ms,
        max_poll_records: int = DEFAULTS.max_poll_records,
        enable_auto_commit: bool = DEFAULTS.enable_auto_commit,
        auto_commit_interval_ms: int = DEFAULTS.auto_commit_interval_ms,
        partition_assignment_strategy: Sequence[str] = DEFAULTS.partition_assignment_strategy,
        auto_offset_reset: str = DEFAULTS.auto_offset_reset,
        isolation_level: str = DEFAULTS.isolation_level,
        request_timeout_ms: int = DEFAULTS.request_timeout_ms,
        retry_backoff_ms: int = DEFAULTS.retry_backoff_ms,
        connections: Connections | None = None,
        security: SecuritySettings | Mapping[str, object] | None = None,
        clock: Callable[[], float] = time.monotonic,
        **fetch_options: int,
    ) -> None:
        if not group_id:
            raise ValueError("group.id is required")
        # Built once from the registry (an InvalidConfigError names a bad value) and read from here.
        self.settings = settings = ConsumerSettings.from_configs(
            {
                "client.id": client_id,
                "group.instance.id": group_instance_id,
                "session.timeout.ms": session_timeout_ms,
                "heartbeat.interval.ms": heartbeat_interval_ms,
                "max.poll.interval.ms": max_poll_interval_ms,
                "max.poll.records": max_poll_records,
                "enable.auto.commit": enable_auto_commit,
                "auto.commit.interval.ms": auto_commit_interval_ms,
                "partition.assignment.strategy": tuple(partition_assignment_strategy),
                "auto.offset.reset": auto_offset_reset,
                "isolation.level": isolation_level,
                "request.timeout.ms": request_timeout_ms,
                "retry.backoff.ms": retry_backoff_ms,
                **{name.replace("_", "."): value for name, value in fetch_options.items()},
            }
        )
        self.group_id = group_id
        self.connections = connections or Connections(security, call_metadata=client_id_metadata(client_id))
        self._owns_connections = connections is None
        self.consumer = Consumer(
            bootstrap,
            auto_offset_reset=auto_offset_reset,
            isolation_level=isolation_level,
            request_timeout_ms=request_timeout_ms,
            retry_backoff_ms=retry_backoff_ms,
            connections=self.connections,
            **fetch_options,  # type: ignore[arg-type]  # (ints only: fetch.* settings, never `security`)
        )
        self.metadata = self.consumer.metadata
        self.link = CoordinatorLink(
            group_id,
            self.metadata,
            self.connections,
            request_timeout_s=settings.request_timeout_ms / 1000,
            retry_backoff_s=settings.retry_backoff_ms / 1000,
        )
        self.protocol_client = GroupProtocol(group_id, self.link, self.metadata, settings)
        self._topics: list[str] = []
        self._pattern: re.Pattern[str] | None = None
        self._listener: RebalanceListener | None = None
        self.membership = Membership(static=bool(group_instance_id))
        self._owned: set[TopicPartition] = set()
        self._buffer: list[RecordRun] = []  # fetched, beyond max.poll.records: the next polls'
        self._consumed: dict[TopicPartition, int] = {}  # next offset after what poll() returned
        self.clock = clock  # max.poll.interval.ms and auto.commit.interval.ms are measured on it
        self._last_poll = clock()
        self._last_auto_commit = clock()
        self._heartbeat_task: asyncio.Task[None] | None = None
        self.stalls = StallWatch(settings.session_timeout_ms / 1000, clock)
        self._join_task: asyncio.Task[None] | None = None
        self._pending_commits: set[asyncio.Task[None]] = set()
        self.missing_topics = MissingTopics(group_id, self.metadata, clock)
        # Held by a poll's fetch and by the join task's assignment change: a cooperative member
        # fetches while it joins, and partitions must not move under a fetch.
        self._assignment_lock = asyncio.Lock()

    @property
    def member_id(self) -> str:
        return self.membership.member_id

    @property
    def generation_id(self) -> int:
        return self.membership.generation_id

    @property
    def protocol(self) -> str:
        return self.membership.protocol

    @property
    def _closed(self) -> bool:
        return self.membership.at(MemberState.CLOSED)

    async def __aenter__(self) -> GroupConsumer:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    # ---- subscription ----------------------------------------------------------------------

    def subscribe(
        self, topics: Iterable[str] = (), *, pattern: str | None = None, listener: RebalanceListener | None = None
    ) -> None:
        self._topics = sorted(set(topics))
        self._pattern = re.compile(pattern) if pattern else None
        if not self._topics and self._pattern is None:
            raise ValueError("subscribe to topics or a pattern")
        self._listener = listener
        self.membership.rejoin_needed = True

    def assignment(self) -> set[TopicPartition]:
        return set(self._owned)

    async def unsubscribe(self) -> None:
        """Leave the group and drop the subscription (Kafka's unsubscribe); `subscribe` rejoins."""
        if self._join_task is not None:
            self._join_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, TidelogError):
                await self._join_task
            self._join_task = None
        if self._owned and self.membership.has_generation:
            await self._revoke(set(self._owned))
        await self._leave()
        self._owned.clear()
        self.consumer.assign(())
        self._buffer.clear()
        self._topics, self._pattern = [], None
        self.membership.rejoin_needed = False  # nothing to join until the next subscribe

    async def _subscribed_topics(self) -> list[str]:
        if self._pattern is None:
            return self._topics
        await self.metadata.refresh()
        return sorted(topic for topic in self.metadata.partitions if self._pattern.fullmatch(topic))

    # ---- membership ------------------------------------------------------------------------

    async def _ensure_member(self, timeout_s: float) -> bool:
        """Join (or rejoin) as a background task; wait for it at most `timeout_s` (as Kafka's poll
        bounds a rebalance by its timeout). True once this is a member with an assignment."""
        if self._heartbeat_task is None:
            self._heartbeat_task = asyncio.create_task(self._heartbeats(), name=f"heartbeat-{self.group_id}")
            self.stalls.start(name=f"stalls-{self.group_id}")
        if self._join_task is None and self.membership.must_join:
            self._join_task = asyncio.create_task(self._join_until_member(), name=f"join-{self.group_id}")
        if self._join_task is not None:
            await asyncio.wait({self._join_task}, timeout=timeout_s)
            if not self._join_task.done():
                return False
            task, self._join_task = self._join_task, None
            task.result()  # a fatal membership error surfaces here
        return self.membership.has_generation

    async def _join_until_member(self) -> None:
        while self.membership.must_join:
            try:
                await self._rejoin()
            except BaseException:
                self.membership.join_failed()  # a fatal error, or cancelled: the next poll starts over
                raise

    async def _rejoin(self) -> None:
        assignor = ASSIGNORS[self.settings.partition_assignment_strategy[0]]
        if not assignor.cooperative and self._owned:
            await self._revoke(set(self._owned))
        topics = await self._subscribed_topics()
        await self.missing_topics.note(topics)  # as Kafka: still subscribed, assigned once they exist
        subscription = Subscription(topics, sorted(self._owned))
        self.membership.begin_join()
        joined = await self.protocol_client.join(self.member_id, subscription)
        if not self.membership.at(MemberState.JOINING):
            return  # left the group meanwhile (max.poll.interval.ms): the next poll joins again
        if joined.error_code:
            await self._handle_membership_error(joined.error_code, joined.error_message)
            self.membership.join_failed()
            return
        self.membership.joined(joined.member_id, joined.generation_id, joined.protocol_name)
        assignments: list[coordinator_pb2.Assignment] = []
        if joined.leader == joined.member_id and joined.members:
            assignments = await self.protocol_client.assign(joined)
        synced = await self.protocol_client.sync(self.generation_id, self.member_id, assignments)
        if not self.membership.at(MemberState.SYNCING):
            return  # left the group meanwhile
        if synced.error_code:
            await self._handle_membership_error(synced.error_code, synced.error_message)
            self.membership.join_failed()
            return
        self.membership.synced()
        await self._apply_assignment(set(decode_assignment(synced.assignment)))

    async def _apply_assignment(self, assigned: set[TopicPartition]) -> None:
        async with self._assignment_lock:  # not under a fetch of the partitions it moves
            await self._assign(assigned)

    async def _assign(self, assigned: set[TopicPartition]) -> None:
        revoked = self._owned - assigned
        if revoked:
            await self._revoke(revoked)  # cooperative: only what moved; then rejoin to let it go
            self.membership.rejoin_needed = True
        added = assigned - self._owned
        self._owned = assigned
        self.consumer.assign(assigned)
        self._buffer = [run for run in self._buffer if run.partition in assigned]
        for tp in added:
            self._consumed.pop(tp, None)  # what an earlier ownership consumed is no position now
        if added:
            committed = await self.committed(added)
            for tp, offset in committed.items():
                if offset is not None:
                    self.consumer.seek(tp, offset)
                    self._consumed[tp] = offset
        log.info(
            "partitions_assigned",
            group=self.group_id,
            generation=self.generation_id,
            partitions=sorted(str(tp) for tp in assigned),
        )
        if self._listener is not None:
            await self._listener.on_partitions_assigned(added)

    async def _revoke(self, partitions: set[TopicPartition]) -> None:
        if self.settings.enable_auto_commit and self.membership.has_generation:
            with contextlib.suppress(TidelogError):
                await self.commit({tp: pos for tp, pos in self._positions().items() if tp in partitions})
        if self._listener is not None:
            await self._listener.on_partitions_revoked(partitions)
        self._owned -= partitions
        self.consumer.assign(self._owned)
        for tp in partitions:
            self._consumed.pop(tp, None)

    async def _lose(self) -> None:
        """The membership is gone: its partitions are lost (not revoked: someone else may own them)."""
        lost = set(self._owned)
        self._owned.clear()
        self._consumed.clear()
        self.consumer.assign(())
        self._buffer.clear()
        if lost and self._listener is not None:
            await self._listener.on_partitions_lost(lost)

    async def _handle_membership_error(self, code: int, message: str) -> None:
        if code in LOST_CODES:
            log.info("group_membership_lost", group=self.group_id, error=ErrorCode(code).name)
            self.membership.lose(code)
            await self._lose()
            if code == ErrorCode.FENCED_INSTANCE_ID:
                raise error_for(code, message)
        elif code not in REJOIN_CODES:
            raise error_for(code, message)

    async def _heartbeats(self) -> None:
        while not self._closed:
            await asyncio.sleep(self.settings.heartbeat_interval_ms / 1000)
            if not self.membership.has_generation or not self.member_id:
                continue
            if self.clock() - self._last_poll > self.settings.max_poll_interval_ms / 1000:
                log.warning("max_poll_interval_exceeded", group=self.group_id, member=self.member_id)
                await self._leave()
                continue
            generation = self.generation_id
            try:
                response = await self.protocol_client.heartbeat(generation, self.member_id)
            except TidelogError as error:
                log.info("heartbeat_failed", group=self.group_id, error=str(error))
                continue
            joining = self._join_task is not None and not self._join_task.done()
            if generation != self.generation_id or (joining and response.error_code in REJOIN_CODES):
                continue  # about a rebalance that the join under way (or already done) takes part in
            if response.error_code in REJOIN_CODES:
                self.membership.rejoin_needed = True
            elif response.error_code in LOST_CODES:
                self.membership.lose(response.error_code)  # poll() reports the loss and rejoins

    async def _leave(self) -> None:
        await self.protocol_client.leave(self.member_id)
        self.membership.leave()

    # ---- polling ---------------------------------------------------------------------------

    async def poll(self, timeout_ms: int = 1000) -> list[ConsumerRecord]:
        """Up to `max.poll.records` records; joins, rebalances and auto-commits happen here."""
        return records_of(await self.poll_runs(timeout_ms))

    async def poll_runs(self, timeout_ms: int = 1000) -> list[RecordRun]:
        """`poll`'s bulk form: the same records, as runs of columns (consumer_records.py)."""
        if self._closed:
            raise RuntimeError("consumer is closed")
        self._last_poll = self.clock()
        if not self.membership.has_generation and self._owned:
            async with self._assignment_lock:  # a join under way changes the assignment under it too
                await self._lose()
        started = self.clock()
        keeps_reading = self._keeps_reading_while_joining()
        if not await self._ensure_member(0 if keeps_reading else timeout_ms / 1000) and not keeps_reading:
            return []
        if await self.missing_topics.appeared():
            self.membership.rejoin_needed = True  # so the group assigns its partitions
        if not self._buffer:
            remaining_ms = max(int(timeout_ms - (self.clock() - started) * 1000), 0)
            # The join task changes the assignment only between fetches (_assignment_lock).
            async with self._assignment_lock:
                self._buffer = await self.consumer.poll_runs(remaining_ms) if self._owned else []
            if self.stalls.stalled_past_session() and self.membership.has_generation:
                log.warning("member_stalled_past_session", group=self.group_id, member=self.member_id)
                self.membership.lose(ErrorCode.UNKNOWN_MEMBER_ID)
            if not self.membership.has_generation:
                self._buffer = []  # the membership was lost during the fetch: so were its partitions
            if not self._owned:
                await asyncio.sleep(min(remaining_ms, 100) / 1000)
        runs, self._buffer = take(self._buffer, self.settings.max_poll_records)
        self._consumed.update(next_offsets(runs))  # what to commit: after each partition's last record
        if (
            self.settings.enable_auto_commit
            and self.clock() - self._last_auto_commit >= self.settings.auto_commit_interval_ms / 1000
        ):
            self._last_auto_commit = self.clock()
            self.commit_async()
        return runs

    def _keeps_reading_while_joining(self) -> bool:
        """KIP-429: a cooperative member goes on fetching and returning the partitions it owns
        while a rebalance runs (a join, or waiting out a dead member's session); only those the
        new assignment moves stop, when revoked. An eager member revoked everything before joining."""
        if not self._owned or not self.membership.has_generation:
            return False
        return ASSIGNORS[self.membership.protocol or self.settings.partition_assignment_strategy[0]].cooperative

    def _positions(self) -> dict[TopicPartition, int]:
        """The position of every assigned partition whose position is known — the offset of the
        next record `poll` returns, after everything it returned — as Kafka's consumer commits
        (`allConsumed`): a partition nothing was read from yet is committed at its position too,
        so the group's committed offsets and lag cover every partition it owns."""
        buffered = first_offsets(self._buffer)
        positions: dict[TopicPartition, int] = {}
        for tp in self._owned:
            position = self._consumed.get(tp, buffered.get(tp))
            if position is None:
                position = self.consumer.known_position(tp)
            if position is not None:
                positions[tp] = position
        return positions

    async def position(self, partition: TopicPartition) -> int:
        return await self.consumer.position(partition)

    async def beginning_offsets(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        return await self.consumer.beginning_offsets(partitions)

    async def end_offsets(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        return await self.consumer.end_offsets(partitions)

    def seek(self, partition: TopicPartition, offset: int) -> None:
        self._buffer = [run for run in self._buffer if run.partition != partition]
        self.consumer.seek(partition, offset)
        self._consumed[partition] = offset

    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        self.consumer.pause(partitions)

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        self.consumer.resume(partitions)

    # ---- offsets ---------------------------------------------------------------------------

    async def commit(self, offsets: Mapping[TopicPartition, int] | None = None) -> None:
        """Commit `offsets` (default: everything `poll` returned) and wait for the coordinator."""
        wanted = dict(offsets) if offsets is not None else self._positions()
        if not wanted:
            return
        generation = self.generation_id if self.member_id else -1
        response = await self.protocol_client.commit_offsets(generation, self.member_id, wanted)
        if response.error_code:
            if response.error_code in LOST_CODES and generation != self.generation_id:
                # About a generation a join has moved on from meanwhile (its answer crossed this
                # commit): the membership stands. Kafka's consumer checks generationUnchanged().
                raise error_for(ErrorCode.REBALANCE_IN_PROGRESS, response.error_message)
            if response.error_code in LOST_CODES:
                self.membership.lose(response.error_code)  # as a heartbeat's: poll reports the loss
            elif response.error_code in REJOIN_CODES and (self._join_task is None or self._join_task.done()):
                # A join under way already takes part in this rebalance (a cooperative member
                # commits while it joins): asking for another would start a second one after it.
                self.membership.rejoin_needed = True
            raise error_for(response.error_code, response.error_message)
        failed = [entry for entry in response.partitions if entry.error_code]
        if failed:
            raise RemoteError(
                ErrorCode(failed[0].error_code), f"commit refused for {failed[0].topic}-{failed[0].partition}"
            )

    def commit_async(self, offsets: Mapping[TopicPartition, int] | None = None) -> asyncio.Task[None]:
        async def run() -> None:
            try:
                await self.commit(offsets)
            except TidelogError as error:
                log.info("async_commit_failed", group=self.group_id, error=str(error))

        task = asyncio.create_task(run())
        self._pending_commits.add(task)
        task.add_done_callback(self._pending_commits.discard)
        return task

    async def committed(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int | None]:
        wanted = sorted(set(partitions))
        response = await self.protocol_client.fetch_offsets(wanted)
        if response.error_code:
            raise error_for(response.error_code, response.error_message)
        found = {TopicPartition(entry.topic, entry.partition): entry.offset for entry in response.partitions}
        return {tp: (found.get(tp, -1) if found.get(tp, -1) >= 0 else None) for tp in wanted}

    # ---- closing ---------------------------------------------------------------------------

    async def close(self) -> None:
        if self._closed:
            return
        try:
            if self.settings.enable_auto_commit and self._owned and self.membership.has_generation:
                with contextlib.suppress(TidelogError):
                    await self.commit()
            if self._pending_commits:
                await asyncio.gather(*self._pending_commits, return_exceptions=True)
            if self._owned and self._listener is not None:
                await self._listener.on_partitions_revoked(set(self._owned))
            await self._leave()
        finally:
            self.membership.close()
            if self._join_task is not None:
                self._join_task.cancel()
                with contextlib.suppress(asyncio.CancelledError, TidelogError):
                    await self._join_task
            if self._heartbeat_task is not None:
                self._heartbeat_task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._heartbeat_task
            await self.stalls.stop()
            await self.consumer.close()
            if self._owns_connections:
                await self.connections.close()
