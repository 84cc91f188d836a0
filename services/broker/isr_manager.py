"""The leader's side of the ISR (KIP-497): shrink it when a follower lags, expand it when one catches up.

Every check interval (half of `replica.lag.time.max.ms`, at most 500 ms) each partition this broker
leads is examined: an ISR follower whose last caught-up fetch (reaching our log end) is older than
`replica.lag.time.max.ms` leaves; a replica outside the ISR whose log end reached the high
watermark and the start of the current leader epoch, by a fetch within the lag time, joins. The
change goes to the active controller as AlterPartition for the exact (leader epoch, partition
epoch) we hold; the controller commits it to etcd and answers with the state in force, which we
apply at once (a shrink may let the high watermark move). One request per partition at a time.

While a change is in flight the high watermark waits for the union of the old and the new ISR
(KIP-497's maximal ISR): the controller may commit it and elect a replica it added before the
answer reaches us (a leader frozen meanwhile learns it seconds later). The request names the life
(incarnation) of each member whose fetches the leader saw; the controller admits a joining replica
only if that life is the one registered now (KIP-903), so a restarted broker never joins on what
its previous life had fetched."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Final

import grpc
import structlog

from tidelog.broker.metadata_cache import MetadataCache
from tidelog.broker.replica_manager import Partition, ReplicaManager
from tidelog.broker.replica_role import ReplicaRole
from tidelog.common import metrics_catalog
from tidelog.common.channels import ChannelPool
from tidelog.common.errors import ErrorCode
from tidelog.v1 import controller_pb2, controller_pb2_grpc

__all__ = ["IsrManager"]

log = structlog.get_logger(__name__)

ISR_SHRINKS: Final = metrics_catalog.counter("kafka_server_replicamanager_isrshrinks_total")
ISR_EXPANDS: Final = metrics_catalog.counter("kafka_server_replicamanager_isrexpands_total")


class IsrManager:
    def __init__(
        self,
        replicas: ReplicaManager,
        metadata: MetadataCache,
        *,
        lag_time_max_ms: int,
        channels: ChannelPool | None = None,
    ) -> None:
        assert lag_time_max_ms > 0
        self.replicas = replicas
        self.metadata = metadata
        self.lag_s = lag_time_max_ms / 1000
        self.interval_s = min(self.lag_s / 2, 0.5)
        self._pending: set[tuple[str, int]] = set()
        self._channels = channels or ChannelPool()

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                await self.check_once()
            except Exception:
                log.exception("isr_check_failed")

    def wanted_isr(self, partition: Partition, now: float) -> list[int]:
        me = self.replicas.broker_id
        isr = list(partition.state.isr)
        keep = [
            member
            for member in isr
            if member == me or now - partition.caught_up_s(member, partition.leader_since_s) <= self.lag_s
        ]
        epochs = partition.log.leader_epochs.entries()
        epoch_start = epochs[-1][1] if epochs else 0
        floor = max(partition.log.high_watermark, epoch_start)
        # Only a follower fetching now joins: a stale position from one that stalled proves nothing.
        joining = [
            replica
            for replica in partition.state.replicas
            if replica not in isr
            and partition.follower_end.get(replica, -1) >= floor
            and now - partition.fetched_s(replica) <= self.lag_s
        ]
        return keep + joining

    async def check_once(self) -> None:
        """Look at the partitions in the replica manager's ISR watch (not every partition: a
        settled one is left alone until something could unsettle it)."""
        now = time.monotonic()
        changes = []
        watch = self.replicas.isr_watch
        # A session quiet for half the lag time: its followers may be gone, look at theirs again
        # (they leave the ISR once quiet for the whole lag time, judged by the session's last fetch).
        quiet_s = self.lag_s / 2
        self.replicas.watch_quiet_sessions(quiet_s)
        for key in list(watch):
            partition = self.replicas.partitions.get(key)
            if partition is None or partition.role is not ReplicaRole.LEADER:
                watch.discard(key)
                continue
            if key in self._pending:
                continue
            if self.replicas.settled(partition, now, quiet_s):
                watch.discard(key)
                continue
            pending = partition.pending_isr
            if pending is not None and pending[0] == partition.state.partition_epoch:
                # Asked before and never answered: the controller may have committed it or not.
                # Ask the same again until an answer settles it (Kafka's AlterPartitionManager);
                # a fresh request in its place would leave the old one counting in the HW forever.
                changes.append(self._alter(partition, list(pending[1])))
                continue
            wanted = self.wanted_isr(partition, now)
            if set(wanted) != set(partition.state.isr):
                changes.append(self._alter(partition, wanted))
        if changes:
            await asyncio.gather(*changes)

    def _stub(self) -> controller_pb2_grpc.ControllerStub | None:
        endpoint = self.metadata.controller_endpoint
        if not endpoint:
            return None
        return controller_pb2_grpc.ControllerStub(self._channels.channel(endpoint))

    async def _alter(self, partition: Partition, wanted: list[int]) -> None:
        key = (partition.topic, partition.partition)
        stub = self._stub()
        if stub is None:
            return
        self._pending.add(key)
        # Before the request leaves: from now on the HW waits for the union of both ISRs.
        partition.pending_isr = (partition.state.partition_epoch, tuple(wanted))
        try:
            request = controller_pb2.AlterPartitionRequest(
                broker_id=self.replicas.broker_id,
                topic=partition.topic,
                partition=partition.partition,
                leader_epoch=partition.state.leader_epoch,
                partition_epoch=partition.state.partition_epoch,
                new_isr=wanted,
                new_isr_incarnations={
                    replica: partition.follower_incarnation[replica]
                    for replica in wanted
                    if replica in partition.follower_incarnation
                },
            )
            response = await stub.AlterPartition(request, timeout=5)
            if response.error_code and response.error_code != ErrorCode.INVALID_UPDATE_VERSION:
                # Refused for the very partition epoch we hold: nothing of ours was committed since.
                # (FENCED_LEADER_EPOCH is checked first and proves nothing: we are deposed, and
                # the next LeaderAndIsr replaces the state and with it the pending change.)
                if response.error_code != ErrorCode.FENCED_LEADER_EPOCH:
                    partition.pending_isr = None
                log.info(
                    "alter_partition_refused",
                    topic=partition.topic,
                    partition=partition.partition,
                    error=ErrorCode(response.error_code).name,
                    message=response.error_message,
                    ours=(request.leader_epoch, request.partition_epoch),
                    controllers=(response.state.leader, response.state.leader_epoch, response.state.partition_epoch),
                )
                return
            if response.HasField("state"):
                before = set(partition.state.isr)
                self.replicas.apply_committed_state(response.state)
                after = set(response.state.isr)
                if after < before:
                    ISR_SHRINKS.inc()
                elif after > before:
                    ISR_EXPANDS.inc()
                log.info(
                    "isr_updated", topic=partition.topic, partition=partition.partition, isr=list(response.state.isr)
                )
        except grpc.aio.AioRpcError as error:
            log.info("alter_partition_failed", code=error.code().name)
        finally:
            self._pending.discard(key)

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self._channels.close()
