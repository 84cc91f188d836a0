"""A broker is ready for the next one to restart when no partition it hosts is under-replicated.

A rolling restart (a StatefulSet update, `kubectl rollout restart`) restarts one broker, waits for
its pod to be Ready, then restarts the next. If Ready meant only "listening", the next broker
could stop while the first is still catching up, and every partition the two share would drop to
one in-sync replica: below min.insync.replicas 2, acks=all produce fails. Strimzi's rolling updater
checks the same before it rolls a pod.

Ready here: the controller has sent this broker the cluster's state, and every partition it hosts
has each replica on a registered broker in its ISR. Replicas on brokers that are not registered
(a broker lost for good, a node down) are not waited for: otherwise one dead broker would make
every broker unready at once, and nothing could roll. The state is the metadata the controller
pushed (UpdateMetadata), recomputed only when that changed.

With the controller's automatic leader rebalance on (`auto.leader.rebalance.enable`, which the
controller states in UpdateMetadata), ready also waits until the controller has handed this
broker back the leaderships it prefers, by the controller's own rule (`awaits_hand_back`). A
broker back in every ISR is handed its leaderships at that moment: if the next broker stopped
then, its controlled shutdown and the hand-back, each over thousands of partitions, would run
at once, and the producers of every moved partition would wait on both. Strimzi's KafkaRoller
2.0 proposal waits the same way for a restarted broker to lead its preferred partitions.

Kubernetes' readiness probe reads it through a file, as Strimzi's does (`broker.readiness.file`:
present while ready): the probe then works whatever the listener's security, which a kubelet's
gRPC or HTTP probe could not pass. `tidelog_broker_ready` exports the same.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from pathlib import Path
from typing import Final

import structlog

from tidelog.broker.metadata_cache import MetadataCache, PartitionKey
from tidelog.server_common import metrics_catalog
from tidelog.server_common.loop_slices import LoopSlices
from tidelog.v1 import broker_pb2, common_pb2

__all__ = ["Readiness", "awaits_hand_back", "under_replicated_hosted"]

log = structlog.get_logger(__name__)

CHECK_INTERVAL_S: Final = 0.1  # a look costs nothing unless the metadata changed

READY: Final = metrics_catalog.gauge("tidelog_broker_ready")


def under_replicated_hosted(broker_id: int, metadata: MetadataCache) -> int:
    """Partitions with a replica on this broker whose ISR lacks a replica on a registered broker."""
    live = {broker.broker_id for broker in metadata.brokers}
    return sum(
        _under_replicated_here(broker_id, state, live) for states in metadata.topics.values() for state in states
    )


def awaits_hand_back(broker_id: int, metadata: MetadataCache) -> bool:
    """Whether the controller's rebalance will move leaderships to this broker: the share of the
    partitions it prefers (first replica) that others lead is above
    `leader.imbalance.per.broker.percentage`, and some of those have it in sync (the controller's
    `imbalanced_partitions`, which this mirrors: services share no code but the wire)."""
    preferences = [
        preference
        for states in metadata.topics.values()
        for state in states
        if (preference := _preference(broker_id, state)) is not None
    ]
    return _hand_back_due(metadata.leader_balance, preferences)


def _under_replicated_here(broker_id: int, state: common_pb2.PartitionState, live: set[int]) -> bool:
    replicas = state.replicas
    if broker_id not in replicas or len(state.isr) >= len(replicas):
        return False
    isr = set(state.isr)
    return any(replica in live and replica not in isr for replica in replicas)


def _preference(broker_id: int, state: common_pb2.PartitionState) -> tuple[bool, bool] | None:
    """For a partition this broker prefers to lead: (another leads it, and this broker is in sync)."""
    if not state.replicas or state.replicas[0] != broker_id:
        return None
    not_led = state.leader != broker_id
    return not_led, not_led and broker_id in state.isr


def _hand_back_due(balance: broker_pb2.LeaderBalance | None, preferences: Iterable[tuple[bool, bool]]) -> bool:
    if balance is None or not balance.auto_leader_rebalance_enable:
        return False
    preferred = not_led = movable = 0
    for other_leads, in_sync in preferences:
        preferred += 1
        not_led += other_leads
        movable += in_sync
    return movable > 0 and not_led * 100 > balance.leader_imbalance_per_broker_percentage * preferred


class Readiness:
    def __init__(self, broker_id: int, metadata: MetadataCache, file: Path | None) -> None:
        self.broker_id = broker_id
        self.metadata = metadata
        self.file = file
        self.ready = False
        # In every ISR (no partition hosted here under-replicated), hand-back aside: the moment a
        # restart's catch-up ended, logged (`broker_in_sync`) for the operator and bench_scale.
        self.in_sync = False
        self._seen_version = -1
        # Kept per partition, so that an update recounts only the partitions it changed
        # (MetadataCache.changed_since): recounting all of them at every update of a restart's ISR
        # changes cost a 10,000-partition broker 20-40 ms each, on every broker.
        self._under: set[PartitionKey] = set()  # hosted here and under-replicated
        self._preferred: dict[PartitionKey, tuple[bool, bool]] = {}  # _preference of those it prefers
        READY.set(0)

    async def check(self) -> bool:
        """Recount what the metadata changed; write or remove the file on a change of state.

        A whole recount (the live brokers changed: every broker's stop and start) covers every
        partition, 0.1-0.2 s of a busy broker at 10,000: it lets the event loop go between slices
        (loop_slices.py). An update meanwhile is recounted by the next check: the version seen is
        the one the recount started from."""
        metadata = self.metadata
        if metadata.version != self._seen_version:
            changed = metadata.changed_since(self._seen_version) if self._seen_version >= 0 else None
            self._seen_version = metadata.version
            live = {broker.broker_id for broker in metadata.brokers}
            pacer = LoopSlices()
            if changed is None:
                self._under.clear()
                self._preferred.clear()
                # A list, not the cache's own dict: an update during a yield may replace it.
                for state in [state for states in metadata.topics.values() for state in states]:
                    await pacer.pace()
                    self._recount((state.topic, state.partition), state, live)
            else:
                for key in changed:
                    await pacer.pace()
                    self._recount(key, metadata.state_of(*key), live)
            in_sync = metadata.initialised and not self._under
            if in_sync != self.in_sync:
                self.in_sync = in_sync
                log.info("broker_in_sync", in_sync=in_sync)
            ready = in_sync and not _hand_back_due(metadata.leader_balance, self._preferred.values())
            if ready != self.ready:
                self.ready = ready
                log.info("broker_readiness", ready=ready)
                READY.set(int(ready))
                self._write(ready)
        return self.ready

    def _recount(self, key: PartitionKey, state: common_pb2.PartitionState | None, live: set[int]) -> None:
        if state is not None and _under_replicated_here(self.broker_id, state, live):
            self._under.add(key)
        else:
            self._under.discard(key)
        preference = None if state is None else _preference(self.broker_id, state)
        if preference is None:
            self._preferred.pop(key, None)
        else:
            self._preferred[key] = preference

    async def run(self) -> None:
        self._write(False)  # a file a previous life left says nothing about this one
        while True:
            await self.check()
            await asyncio.sleep(CHECK_INTERVAL_S)

    def close(self) -> None:
        self._write(False)
        READY.set(0)

    def _write(self, ready: bool) -> None:
        if self.file is None:
            return
        if ready:
            self.file.parent.mkdir(parents=True, exist_ok=True)
            self.file.write_text(f"broker {self.broker_id} ready\n")
        else:
            with contextlib.suppress(FileNotFoundError):
                self.file.unlink()
