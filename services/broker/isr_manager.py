"""The leader's side of the ISR (KIP-497): shrink it when a follower lags, expand it when one catches up.

Every check interval (half of `replica.lag.time.max.ms`, at most 500 ms) each partition this broker
leads is examined: an ISR follower whose last caught-up fetch (reaching our log end) is older than
`replica.lag.time.max.ms` leaves; a replica outside the ISR whose log end reached the high
watermark and the start of the current leader epoch, by a fetch within the lag time, joins. The
change goes to the active controller as AlterPartition for the exact (leader epoch, partition
epoch) we hold; the controller commits it to etcd and answers with the state in force, which we
apply at once (a shrink may let the high watermark move). One change per partition in flight; the
changes of one check travel together (up to ISR_CHANGES_PER_REQUEST per request).

A replica outside the ISR whose fetch reaches the high watermark does not wait for the next round:
its partitions are checked CAUGHT_UP_GATHER_S after that fetch (the rest of the follower's fetches
meanwhile join them), only those, as Kafka expands the ISR in the fetch that catches up. A broker
restarted at 10,000 partitions waited up to a round on each leader before it was asked back.

While a change is in flight the high watermark waits for the union of the old and the new ISR
(KIP-497's maximal ISR): the controller may commit it and elect a replica it added before the
answer reaches us (a leader frozen meanwhile learns it seconds later). The request names the life
(incarnation) of each member whose fetches the leader saw; the controller admits a joining replica
only if that life is the one registered now (KIP-903), so a restarted broker never joins on what
its previous life had fetched."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import math
from typing import Final

import grpc
import structlog

from tidelog.broker.metadata_cache import MetadataCache
from tidelog.broker.partition import Partition, PartitionKey
from tidelog.broker.replica_manager import ReplicaManager
from tidelog.broker.replica_role import ReplicaRole
from tidelog.common.channels import ChannelPool
from tidelog.common.errors import ErrorCode
from tidelog.server_common import metrics_catalog
from tidelog.server_common.loop_slices import LoopSlices
from tidelog.v1 import controller_pb2, controller_pb2_grpc

__all__ = ["IsrManager"]

log = structlog.get_logger(__name__)

ISR_SHRINKS: Final = metrics_catalog.counter("kafka_server_replicamanager_isrshrinks_total")
ISR_EXPANDS: Final = metrics_catalog.counter("kafka_server_replicamanager_isrexpands_total")
ISR_CHANGES_PER_REQUEST: Final = 1000  # one AlterPartition carries at most this many (the controller takes 10,000)
ALTER_TIMEOUT_S: Final = 5.0
INELIGIBLE_RETRY_S: Final = 5.0  # an ISR change refused as INELIGIBLE_REPLICA is asked again after this at the latest
ALTER_PER_CHANGE_S: Final = 0.002  # the deadline grows with the batch: the controller commits 100 per transaction
CAUGHT_UP_GATHER_S: Final = 0.02  # a check of caught-up replicas waits this long for the rest of their fetches

Change = tuple[Partition, list[int]]  # a partition and the ISR asked for it
AlterPartition = controller_pb2.AlterPartitionRequest


class IsrManager:
    def __init__(
        self,
        replicas: ReplicaManager,
        metadata: MetadataCache,
        *,
        channels: ChannelPool | None = None,
    ) -> None:
        self.replicas = replicas
        self.metadata = metadata
        self.clock = replicas.clock  # the replicas' own: their fetch times are on it
        self.lag_s = replicas.settings.replica_lag_time_max_ms / 1000
        assert self.lag_s > 0
        self.interval_s = min(self.lag_s / 2, 0.5)
        self._pending: set[tuple[str, int]] = set()
        self._channels = channels or ChannelPool()
        replicas.followers.may_join = metadata.isr_eligible
        self._eligibility_seen: tuple[int, frozenset[int], bool] | None = None

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        next_whole = loop.time() + self.interval_s
        while True:
            caught_up = await self._next_check(next_whole)
            if caught_up is None:
                next_whole = loop.time() + self.interval_s
            try:
                await self.check_once(caught_up)
            except Exception:
                log.exception("isr_check_failed")

    async def _next_check(self, next_whole: float) -> set[PartitionKey] | None:
        """Until the next check: the partitions where a replica outside the ISR caught up, as soon
        as one has; None (the whole watch) at `next_whole`. A restarted broker waited up to a whole
        interval on each leader to rejoin ISRs it had caught up with."""
        followers = self.replicas.followers
        left = next_whole - asyncio.get_running_loop().time()
        if left <= 0:
            return None
        try:
            await asyncio.wait_for(followers.caught_up_news.wait(), left)
        except TimeoutError:
            return None
        await asyncio.sleep(CAUGHT_UP_GATHER_S)
        followers.caught_up_news.clear()
        caught_up, followers.caught_up = followers.caught_up, set()
        return caught_up

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
            # KIP-841: not a broker on its way out, nor a life the controller does not know
            and self.metadata.isr_eligible(replica, partition.follower_incarnation.get(replica))
        ]
        return keep + joining

    async def check_once(self, caught_up: set[PartitionKey] | None = None) -> None:
        """Look at the partitions in the replica manager's ISR watch (not every partition: a
        settled one is left alone until something could unsettle it); with `caught_up`, only at
        those of them."""
        now = self.clock()
        changes: list[tuple[Partition, list[int], int, bool]] = []  # (partition, ISR wanted, at epoch, asked before)
        watch = self.replicas.followers.isr_watch
        # A session quiet for half the lag time: its followers may be gone, look at theirs again
        # (they leave the ISR once quiet for the whole lag time, judged by the session's last fetch).
        quiet_s = self.lag_s / 2
        if caught_up is None:
            self.replicas.followers.watch_quiet_sessions(quiet_s)
            self.replicas.followers.watch_due(now)
            self._watch_all_if_eligibility_changed()
            keys = list(watch)
        else:
            keys = [key for key in caught_up if key in watch]
        # Thousands of partitions to judge (a broker restarting or catching up is missing from
        # them all) held the loop for 0.1-0.25 s at each check, every acks=all produce and fetch
        # of this broker waiting: the loop is let go between slices. What a LeaderAndIsr or an
        # UpdateMetadata changes meanwhile is caught by `_still_wanted` as the changes are sent.
        pacer = LoopSlices()
        for key in keys:
            await pacer.pace()
            partition = self.replicas.partitions.get(key)
            if partition is None or partition.role is not ReplicaRole.LEADER:
                watch.discard(key)
                continue
            if key in self._pending:
                continue
            if self.replicas.followers.settled(partition, now, quiet_s):
                watch.discard(key)
                continue
            pending = partition.pending_isr
            if pending is not None and pending[0] == partition.state.partition_epoch:
                # Asked before and never answered: the controller may have committed it or not.
                # Ask the same again until an answer settles it (Kafka's AlterPartitionManager);
                # a fresh request in its place would leave the old one counting in the HW forever.
                changes.append((partition, list(pending[1]), partition.state.partition_epoch, True))
                continue
            wanted = self.wanted_isr(partition, now)
            if set(wanted) != set(partition.state.isr):
                if not self._refused_before(partition, wanted, now):
                    changes.append((partition, wanted, partition.state.partition_epoch, False))
            elif (due := self._unchangeable_until(partition)) > now + self.interval_s:
                self.replicas.followers.defer(key, due)
        # No await from here until every request is built and its changes marked pending.
        current = [
            (partition, wanted)
            for partition, wanted, epoch, asked in changes
            if self._still_wanted(partition, wanted, epoch, asked_before=asked)
        ]
        step = ISR_CHANGES_PER_REQUEST
        requests = [self._request(current[i : i + step]) for i in range(0, len(current), step)]
        await asyncio.gather(*(self._alter(*request) for request in requests if request is not None))

    def _still_wanted(self, partition: Partition, wanted: list[int], epoch: int, *, asked_before: bool) -> bool:
        """Whether a change judged before the check's last yield may still be asked for: the same
        partition, still led here at the same partition epoch, not asked for meanwhile, and each
        broker it adds still eligible. (Asking, after a yield, to add a broker whose controlled
        shutdown had begun meanwhile made the maximal ISR wait for it: acks=all stood 7-9 s in 4
        of 7 rolling restarts at 10,000 partitions, when this loop first let requests run.) A
        change asked before and never answered is asked again as it was, whoever it adds: only an
        answer ends its wait (the controller refuses an ineligible joiner)."""
        key = (partition.topic, partition.partition)
        if (
            self.replicas.partitions.get(key) is not partition
            or partition.role is not ReplicaRole.LEADER
            or partition.state.partition_epoch != epoch
            or key in self._pending
        ):
            return False
        if asked_before:
            return True
        isr = partition.state.isr
        return all(
            self.metadata.isr_eligible(replica, partition.follower_incarnation.get(replica))
            for replica in wanted
            if replica not in isr
        )

    def _watch_all_if_eligibility_changed(self) -> None:
        """Every partition we lead back in the watch when the brokers that may join an ISR changed
        (registered, gone, in controlled shutdown): a partition left settled because a replica
        fetching it could not join may now have it join (a broker back in the same life)."""
        metadata = self.metadata
        seen = (metadata.brokers_version, metadata.shutting_down, metadata.initialised)
        if seen != self._eligibility_seen:
            self._eligibility_seen = seen
            self.replicas.followers.isr_watch.update(
                key for key, partition in self.replicas.partitions.items() if partition.role is ReplicaRole.LEADER
            )

    def _unchangeable_until(self, partition: Partition) -> float:
        """The earliest time the ISR of `partition`, judged unchanged just now, could change with
        nothing else happening: every replica in it, the first member to lag replica.lag.time.max.ms
        from its last catch-up (which only moves on; a follower's new life, a replica leaving the
        ISR, a state change put the partition back in the watch themselves). -inf if it may change
        at any time."""
        isr = partition.state.isr
        if partition.pending_isr is not None or len(isr) != len(partition.state.replicas):
            return -math.inf
        me = self.replicas.broker_id
        caught_up = [partition.caught_up_s(member, partition.leader_since_s) for member in isr if member != me]
        return min(caught_up) + self.lag_s if caught_up else -math.inf

    def _stub(self) -> controller_pb2_grpc.ControllerStub | None:
        endpoint = self.metadata.controller_endpoint
        if not endpoint:
            return None
        return controller_pb2_grpc.ControllerStub(self._channels.channel(endpoint))

    def _request(
        self, batch: list[Change]
    ) -> tuple[controller_pb2_grpc.ControllerStub, AlterPartition, list[Change]] | None:
        """The AlterPartition for `batch`'s changes, each marked pending as it is (None: no
        controller known, nothing asked)."""
        stub = self._stub()
        if stub is None or not batch:
            return None
        self._pending.update((partition.topic, partition.partition) for partition, _ in batch)
        request = controller_pb2.AlterPartitionRequest(broker_id=self.replicas.broker_id)
        for partition, wanted in batch:
            # Before the request leaves: from now on the HW waits for the union of both ISRs.
            partition.pending_isr = (partition.state.partition_epoch, tuple(wanted))
            request.partitions.add(
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
        return stub, request, batch

    async def _alter(
        self,
        stub: controller_pb2_grpc.ControllerStub,
        request: AlterPartition,
        batch: list[Change],
    ) -> None:
        """Send one AlterPartition (`_request`); each answer applied as it came."""
        keys = [(partition.topic, partition.partition) for partition, _ in batch]
        try:
            response = await stub.AlterPartition(request, timeout=ALTER_TIMEOUT_S + len(batch) * ALTER_PER_CHANGE_S)
            if response.error_code:  # refused whole (not the controller, ...): nothing was committed
                for partition, _ in batch:
                    self._no_change(partition)
                log.info("alter_partition_refused", partitions=len(batch), error=ErrorCode(response.error_code).name)
                return
            refused: collections.Counter[str] = collections.Counter()
            first_refusal: dict[str, object] = {}
            changed: collections.Counter[str] = collections.Counter()
            first_change: dict[str, object] = {}
            for (partition, wanted), result in zip(batch, response.partitions, strict=True):
                if result.error_code and result.error_code != ErrorCode.INVALID_UPDATE_VERSION:
                    self._refused(partition, wanted, result)
                    refused[ErrorCode(result.error_code).name] += 1
                    first_refusal = first_refusal or {
                        "topic": partition.topic,
                        "partition": partition.partition,
                        "message": result.error_message,
                        "ours": (partition.state.leader_epoch, partition.state.partition_epoch),
                        "controllers": (result.state.leader, result.state.leader_epoch, result.state.partition_epoch),
                    }
                elif (change := self._settle(partition, result)) is not None:
                    changed[change] += 1
                    first_change = first_change or {
                        "topic": partition.topic,
                        "partition": partition.partition,
                        "isr": list(result.state.isr),
                    }
            if changed:  # one line a response, as for refusals
                log.info("isr_updated", changes=dict(changed), first=first_change)
            if refused:  # one line for a response's refusals (a broker stopping gets thousands)
                log.info("alter_partition_refused", errors=dict(refused), first=first_refusal)
        except grpc.aio.AioRpcError as error:
            log.info("alter_partition_failed", partitions=len(batch), code=error.code().name)
        finally:
            self._pending.difference_update(keys)

    def _refused(self, partition: Partition, wanted: list[int], result: controller_pb2.PartitionIsrResult) -> None:
        """Refused for the very partition epoch we hold: nothing of ours was committed since.
        (FENCED_LEADER_EPOCH is checked first and proves nothing: we are deposed, and the next
        LeaderAndIsr replaces the state and with it the pending change.)"""
        if result.error_code != ErrorCode.FENCED_LEADER_EPOCH:
            self._no_change(partition)
        if result.error_code == ErrorCode.INELIGIBLE_REPLICA:
            # A joiner the controller will not take (shutting down, or not registered): the same
            # is not asked again until something differs (`_refused_before`).
            partition.refused_isr = (self._isr_request_key(partition, wanted), self.clock())

    def _no_change(self, partition: Partition) -> None:
        """The pending change was not committed: the HW follows the committed ISR alone again. (It
        moves only on a fetch or an append otherwise: a partition whose producer waited for a
        refused joiner, every follower at its end, waited until that broker came back.)"""
        partition.pending_isr = None
        if partition.role is ReplicaRole.LEADER:  # (a follower's HW is the leader's to say)
            partition.advance_high_watermark(self.replicas.broker_id)

    def _refused_before(self, partition: Partition, wanted: list[int], now: float) -> bool:
        """Whether this very change was refused as ineligible, and nothing since can make it
        eligible: the same state, ISR and joiners' lives, no broker registered or gone since (a
        broker back after its session expired keeps its incarnation; the controller's next
        UpdateMetadata says it is live), and not longer ago than INELIGIBLE_RETRY_S (whatever
        else may have changed)."""
        if partition.refused_isr is None:
            return False
        key, refused_at = partition.refused_isr
        return key == self._isr_request_key(partition, wanted) and now - refused_at < INELIGIBLE_RETRY_S

    def _isr_request_key(self, partition: Partition, wanted: list[int]) -> tuple[object, ...]:
        return (
            partition.state.partition_epoch,
            tuple(sorted(wanted)),
            tuple(sorted((replica, partition.follower_incarnation.get(replica, "")) for replica in wanted)),
            self.metadata.brokers_version,
        )

    def _settle(self, partition: Partition, result: controller_pb2.PartitionIsrResult) -> str | None:
        """Apply the controller's acceptance of one change; what it was ("shrunk", "expanded",
        "changed"), None when there was no state to apply."""
        if not result.HasField("state"):
            return None
        before = set(partition.state.isr)
        self.replicas.states.apply_committed_state(result.state)
        after = set(result.state.isr)
        if after < before:
            ISR_SHRINKS.inc()
            return "shrunk"
        if after > before:
            ISR_EXPANDS.inc()
            return "expanded"
        return "changed"

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self._channels.close()
