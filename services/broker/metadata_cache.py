"""The cluster metadata a broker serves to clients, as the controller last sent it (UpdateMetadata)."""

from __future__ import annotations

import collections
import json
from collections.abc import Iterable
from typing import Final

from tidelog.common.errors import ErrorCode
from tidelog.v1 import broker_pb2, common_pb2

__all__ = ["MetadataCache"]

PartitionKey = tuple[str, int]
# Updates remembered for readers that follow the cache's changes (readiness.py): one further behind
# recomputes whole. A reader looks every 0.1 s; a restart at 10,000 partitions makes a few dozen.
JOURNAL_UPDATES_MAX: Final = 256


class MetadataCache:
    def __init__(self) -> None:
        self.controller_id = -1
        self.controller_epoch = -1
        self.controller_endpoint = ""
        self.brokers: list[common_pb2.BrokerEndpoint] = []
        self.brokers_version = 0  # counts changes of `brokers` (a broker registered, or gone)
        self.topics: dict[str, list[common_pb2.PartitionState]] = {}
        self.configs: dict[str, dict[str, str]] = {}
        # The controller's automatic leader rebalance (None: it did not say), for readiness.
        self.leader_balance: broker_pb2.LeaderBalance | None = None
        self.version = 0  # counts updates: what was computed from this cache is stale when it moved
        self.incarnations: dict[int, str] = {}  # live broker id → its registered life
        # Brokers in controlled shutdown (KIP-841), from the controller's latest UpdateMetadata or
        # LeaderAndIsr: leaders do not ask to add them to an ISR.
        self.shutting_down: frozenset[int] = frozenset()
        # (version, the partitions that update changed, or None: anything may have changed)
        self._journal: collections.deque[tuple[int, frozenset[PartitionKey] | None]] = collections.deque(
            maxlen=JOURNAL_UPDATES_MAX
        )

    def changed_since(self, version: int) -> set[PartitionKey] | None:
        """The partitions whose state an update after `version` changed (a deleted one is gone from
        `topics`); None when everything must be looked at again: a whole update, a topic deleted,
        the live brokers changed, or `version` older than what the cache remembers."""
        assert version <= self.version, "versions only grow"
        changed: set[PartitionKey] = set()
        if version == self.version:
            return changed
        if not self._journal or self._journal[0][0] > version + 1:
            return None
        for updated, keys in self._journal:
            if updated <= version:
                continue
            if keys is None:
                return None
            changed |= keys
        return changed

    def update(self, request: broker_pb2.UpdateMetadataRequest) -> None:
        if request.controller_epoch < self.controller_epoch:
            return
        self.version += 1
        self.controller_id = request.controller_id
        self.controller_epoch = request.controller_epoch
        self.controller_endpoint = request.controller_endpoint
        self.leader_balance = request.leader_balance if request.HasField("leader_balance") else None
        live = list(request.live_brokers)
        whole = not request.incremental or bool(request.deleted_topics)
        if live != self.brokers:
            self.brokers, self.brokers_version = live, self.brokers_version + 1
            whole = True
        # At every update, not only when the live brokers changed: a LeaderAndIsr may have made
        # them stricter meanwhile (note_lives) where this update, the same list, says otherwise.
        self.incarnations = {broker.broker_id: broker.incarnation for broker in live}
        self._journal.append(
            (self.version, None if whole else frozenset((state.topic, state.partition) for state in request.partitions))
        )
        self.shutting_down = frozenset(request.shutting_down_brokers)
        if not request.incremental:
            self.topics, self.configs = {}, {}
        for name in request.deleted_topics:
            self.topics.pop(name, None)
            self.configs.pop(name, None)
        changed: dict[str, dict[int, common_pb2.PartitionState]] = {}
        for state in request.partitions:
            changed.setdefault(state.topic, {})[state.partition] = state
        for name, states in changed.items():
            held = self.topics.get(name, [])
            if all(partition < len(held) for partition in states):  # partitions are numbered 0..n-1
                for partition, state in states.items():
                    assert held[partition].partition == partition
                    held[partition] = state  # in place: one changed partition costs one assignment
                continue
            merged = {state.partition: state for state in held}
            merged.update(states)
            self.topics[name] = [merged[partition] for partition in sorted(merged)]
        self.configs.update({name: json.loads(value) for name, value in request.topic_configs_json.items()})

    def note_shutting_down(self, controller_epoch: int, brokers: Iterable[int]) -> None:
        """The brokers in controlled shutdown as a LeaderAndIsr says (it carries the ISR shrinks a
        shutdown causes, ahead of the UpdateMetadata that says so too). Only added here: a broker
        leaves the list when it is gone, and the live brokers come with the UpdateMetadata. Set from
        a LeaderAndIsr, the list had lost a broker that had just deregistered while the live
        brokers still held it: leaders asked to add it back to thousands of ISRs, and their high
        watermarks waited for it (10,000 partitions, a rolling restart: acks=all stood 5 s)."""
        if controller_epoch >= self.controller_epoch:
            self.shutting_down = self.shutting_down | frozenset(brokers)

    def note_lives(self, controller_epoch: int, live: Iterable[common_pb2.BrokerEndpoint]) -> None:
        """The live brokers as a LeaderAndIsr says (ahead of the UpdateMetadata that follows it):
        a broker gone, or registered in another life, is no longer eligible in the life we knew.
        Only ever stricter here, as `note_shutting_down`. A LeaderAndIsr applied in slices took
        a crashed broker out of thousands of ISRs while this cache still held its old life: the
        leaders asked to add it back on that life's fetches between slices, the high watermarks
        waited for it (the maximal ISR) until the controller refused (10,000 partitions, a kill -9
        and a start: 6,000 refusals)."""
        if controller_epoch < self.controller_epoch:
            return
        lives = {broker.broker_id: broker.incarnation for broker in live}
        self.incarnations = {broker_id: lives[broker_id] for broker_id in self.incarnations if broker_id in lives}

    def isr_eligible(self, broker_id: int, incarnation: str | None) -> bool:
        """Whether a leader may ask to add `broker_id`'s replica (fetching as `incarnation`, when
        known) to an ISR (KIP-841): registered in that very life and not in controlled shutdown.
        Asking for one that is not made the high watermark wait for it (the maximal ISR) until the
        controller refused: acks=all stalled for seconds at 10,000 partitions during a rolling
        restart. Before any UpdateMetadata (nothing known yet) every broker is."""
        if not self.initialised:
            return True
        if broker_id in self.shutting_down or broker_id not in self.incarnations:
            return False
        return incarnation is None or self.incarnations[broker_id] == incarnation

    @property
    def initialised(self) -> bool:
        """Whether a controller has sent this broker the cluster's state since it started."""
        return self.controller_epoch >= 0

    def state_of(self, topic: str, partition: int) -> common_pb2.PartitionState | None:
        states = self.topics.get(topic, ())
        if 0 <= partition < len(states) and states[partition].partition == partition:
            return states[partition]
        return None

    def describe(self, topics: list[str]) -> broker_pb2.MetadataResponse:
        response = broker_pb2.MetadataResponse(
            brokers=self.brokers, controller_id=self.controller_id, controller_endpoint=self.controller_endpoint
        )
        for name in topics or sorted(self.topics):
            if name not in self.topics:
                response.topics.add(name=name, error_code=int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
                continue
            response.topics.add(name=name, partitions=self.topics[name], configs=self.configs.get(name, {}))
        return response


def newest_leader(
    *states: common_pb2.PartitionState | None,
) -> tuple[int, int]:
    """The leader, and its leader epoch, of whichever state has the highest epoch; (-1, -1) when
    there is none, or that state has no leader (an older one's would be stale).

    A broker knows a partition's leader from two places: its own replica's state, which a
    LeaderAndIsr sets (the one that makes it a follower names the new leader at once), and the
    metadata cache, which the UpdateMetadata after it sets. In a controlled shutdown the first is
    milliseconds ahead, and a hint from the cache then named the old leader, itself."""
    known = [state for state in states if state is not None]
    if not known:
        return (-1, -1)
    newest = max(known, key=lambda state: state.leader_epoch)
    return (newest.leader, newest.leader_epoch) if newest.leader >= 0 else (-1, -1)
