"""Who leads each partition, and who is in its ISR (Kafka's partition state machine).

The elections the controller runs: when brokers leave, return or restart (leaders move to the
next live in-sync replica, the preferred one first), on request (preferred or unclean), for the
leader balance, and for a broker in controlled shutdown; plus the ISR changes leaders ask for
(AlterPartition, KIP-497), accepted only for the exact state the leader knows. Every change goes
to etcd through the metadata store before anyone hears of it. The caller holds the controller's
mutex and pushes the result to the brokers.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import structlog

from tidelog.common.config import LOG_CONFIGS, parse_configs
from tidelog.common.errors import ErrorCode, RemoteError
from tidelog.controller.controller_role import ControllerRole
from tidelog.controller.leader_balance import imbalanced_partitions, preferred_state, unclean_state
from tidelog.controller.metadata_store import MetadataStore
from tidelog.server_common.metadata import PartitionStateRecord
from tidelog.v1 import common_pb2, controller_pb2

__all__ = ["PartitionLeadership", "affected_by", "isr_refusal"]

log = structlog.get_logger(__name__)

Changes = dict[tuple[str, int], PartitionStateRecord]


class PartitionLeadership:
    def __init__(self, store: MetadataStore, role: ControllerRole) -> None:
        self.store = store
        self.role = role
        self.shutting_down: set[int] = set()  # brokers in controlled shutdown: never elected again

    @property
    def live(self) -> set[int]:
        return set(self.store.state.brokers) - self.shutting_down

    def initial_state(self, replicas: list[int]) -> PartitionStateRecord:
        live = [broker for broker in replicas if broker in self.store.state.brokers]
        return PartitionStateRecord(
            leader=live[0] if live else -1,
            isr=list(replicas),
            leader_epoch=0,
            partition_epoch=0,
            controller_epoch=self.role.epoch,
        )

    async def initialise_missing_states(self) -> None:
        """Partition states a crashed controller did not write yet (the topic record is the commit)."""
        state = self.store.state
        missing = {
            (topic, partition): self.initial_state(versioned.value.replicas(partition))
            for topic, versioned in state.topics.items()
            for partition in state.topic_partitions(topic)
            if (topic, partition) not in state.partitions
        }
        if missing:
            await self.store.write_states(missing)

    def next_state(
        self, topic: str, partition: int, state: PartitionStateRecord, fenced: frozenset[int] = frozenset()
    ) -> PartitionStateRecord | None:
        """The state after electing from the live ISR (the preferred replica first), or None if unchanged."""
        # `fenced`: brokers that left or came back as a new process; their old replica state is gone.
        live = {broker for broker in self.live if broker not in fenced}
        replicas = self.store.state.topics[topic].value.replicas(partition)
        live_isr = [broker for broker in state.isr if broker in live]
        candidates = [broker for broker in replicas if broker in live_isr]
        if state.leader in live and state.leader in live_isr:
            leader = state.leader
        else:
            leader = candidates[0] if candidates else -1
        # The dead leave the ISR, except the last member: it must stay to be elected on return.
        isr = live_isr if live_isr else list(state.isr[:1] if state.leader == -1 else [state.leader])
        if leader == -1 and self._unclean_allowed(topic):
            out_of_sync = [broker for broker in replicas if broker in live]
            if out_of_sync:  # availability over durability, as the topic asked: records may be lost
                leader, isr = out_of_sync[0], [out_of_sync[0]]
                log.warning("unclean_leader_elected", topic=topic, partition=partition, leader=leader)
        if leader == state.leader and isr == state.isr:
            return None
        return state.changed(leader=leader, isr=isr, controller_epoch=self.role.epoch)

    def _unclean_allowed(self, topic: str) -> bool:
        configs = parse_configs(self.store.state.topics[topic].value.configs, LOG_CONFIGS)
        return bool(configs["unclean.leader.election.enable"])

    async def elect(
        self, needs: Callable[[PartitionStateRecord], bool], fenced: frozenset[int] = frozenset()
    ) -> set[int]:
        """Re-elect where `needs(state)`; returns the brokers whose replicas changed."""
        state = self.store.state
        changes: Changes = {}
        for (topic, partition), versioned in state.partitions.items():
            if topic not in state.topics or not needs(versioned.value):
                continue
            next_state = self.next_state(topic, partition, versioned.value, fenced)
            if next_state is not None:
                changes[(topic, partition)] = next_state
        if changes:
            offline = sum(1 for record in changes.values() if record.leader == -1)
            log.info("leaders_elected", partitions=len(changes), offline=offline)
            await self.store.write_states(changes)
        return {broker for topic, partition in changes for broker in state.topics[topic].value.replicas(partition)}

    def elections(
        self, keys: list[tuple[str, int]], *, unclean: bool
    ) -> tuple[list[controller_pb2.PartitionResult], Changes]:
        """Preferred (or unclean) elections for `keys`: a result per partition, and the changes."""
        state = self.store.state
        live = self.live
        elect = unclean_state if unclean else preferred_state
        results = []
        changes: Changes = {}
        for topic, partition in keys:
            result = controller_pb2.PartitionResult(topic=topic, partition=partition)
            held = state.partitions.get((topic, partition))
            if held is None or topic not in state.topics:
                result.error_code = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                result.error_message = f"{topic}-{partition} is unknown"
            else:
                replicas = state.topics[topic].value.replicas(partition)
                outcome = elect(replicas, held.value, live, self.role.epoch)
                if isinstance(outcome, ErrorCode):
                    result.error_code = int(outcome)
                    result.error_message = outcome.name.lower().replace("_", " ")
                else:
                    changes[(topic, partition)] = outcome
            results.append(result)
        return results, changes

    def rebalance(self, imbalance_percentage: int, *, ready: Callable[[int], bool]) -> Changes:
        """Preferred elections where a broker's preferred partitions are led elsewhere above the share
        (partitions being reassigned are left alone: their preferred replica is about to change),
        to brokers `ready` to lead: those that applied a push since they registered. A broker back
        from a restart follows (and may rejoin the ISRs of) the first partitions of its first push
        while it still applies the rest; leadership handed to it meanwhile waits behind that push,
        and its followers' epoch queries are refused until then (seen: 2-3 s acks=all stalls in a
        rolling restart when the push took longer)."""
        state = self.store.state
        moving = {
            (topic, int(partition))
            for topic, versioned in state.topics.items()
            for partition in versioned.value.original
        }
        assignments = {
            key: state.topics[key[0]].value.replicas(key[1])
            for key in state.partitions
            if key[0] in state.topics and key not in moving
        }
        states = {key: versioned.value for key, versioned in state.partitions.items()}
        keys = imbalanced_partitions(assignments, states, {b for b in self.live if ready(b)}, imbalance_percentage)
        _, changes = self.elections(keys, unclean=False)
        return changes

    def announce_shutdown(self, broker_id: int, incarnation: str) -> None:
        """A broker asked for a controlled shutdown: from now on it is not elected leader nor let
        into an ISR. Marked as the request arrives, before it waits its turn: brokers stopping
        together then see each other, and none is handed leaderships it would hand on at once."""
        registered = self.store.state.brokers.get(broker_id)
        if registered is None or registered.incarnation != incarnation:
            raise RemoteError(ErrorCode.STALE_BROKER_EPOCH, f"broker {broker_id} is not registered as this process")
        self.shutting_down.add(broker_id)

    def shutdown_changes(
        self, broker_id: int, incarnation: str, *, followed_only: bool = False
    ) -> tuple[Changes, list[tuple[str, int]]]:
        """A broker in controlled shutdown: its leaderships to other in-sync replicas and it out of
        every ISR (only those of partitions it does not lead with `followed_only`); the partitions it must
        keep leading (no other replica in sync) come back too. A partition whose leader stops too
        keeps its ISR: that leader hands it over, or stops with it, itself (when a whole cluster
        stops, 10,000 ISR changes per broker bought nothing)."""
        self.announce_shutdown(broker_id, incarnation)
        state = self.store.state
        live = self.live
        remaining: list[tuple[str, int]] = []
        changes: Changes = {}
        for key, versioned in sorted(state.partitions.items()):
            record = versioned.value
            if broker_id not in record.isr or key[0] not in state.topics:
                continue
            if followed_only and record.leader == broker_id:
                continue
            isr = [broker for broker in record.isr if broker != broker_id]
            leader = record.leader
            if record.leader == broker_id:
                replicas = state.topics[key[0]].value.replicas(key[1])
                candidates = [broker for broker in replicas if broker in isr and broker in live]
                if not candidates:
                    remaining.append(key)
                    continue
                leader = candidates[0]
            elif not isr or leader in self.shutting_down:
                continue
            changes[key] = record.changed(leader=leader, isr=isr, controller_epoch=self.role.epoch)
        return changes, remaining

    def isr_change(
        self, broker_id: int, request: controller_pb2.PartitionIsrChange
    ) -> tuple[PartitionStateRecord | None, controller_pb2.PartitionIsrResult | None]:
        """One change of a leader's AlterPartition: the next state, or the error answer (KIP-497, KIP-903)."""
        state = self.store.state
        key = (request.topic, request.partition)
        held = state.partitions.get(key)
        if held is None or request.topic not in state.topics:
            return None, isr_refusal(
                request, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{request.topic}-{request.partition} is unknown"
            )
        record = held.value
        # The state in force, built for a refusal only: thousands of changes are accepted at once.
        current = functools.partial(state.partition_proto, *key)
        if broker_id != record.leader or request.leader_epoch != record.leader_epoch:
            return None, isr_refusal(request, ErrorCode.FENCED_LEADER_EPOCH, "not the leader of this epoch", current())
        if request.partition_epoch != record.partition_epoch:
            return None, isr_refusal(
                request, ErrorCode.INVALID_UPDATE_VERSION, "the partition state changed", current()
            )
        replicas = state.topics[request.topic].value.replicas(request.partition)
        new_isr = [broker for broker in replicas if broker in set(request.new_isr)]
        if record.leader not in new_isr or len(new_isr) != len(set(request.new_isr)):
            return None, isr_refusal(
                request, ErrorCode.INELIGIBLE_REPLICA, "the ISR must hold the leader and only replicas", current()
            )
        joining = set(new_isr) - set(record.isr)
        if any(broker not in state.brokers or broker in self.shutting_down for broker in joining):
            return None, isr_refusal(
                request, ErrorCode.INELIGIBLE_REPLICA, "only live brokers not shutting down join the ISR", current()
            )
        stale = sorted(
            broker
            for broker in joining
            if request.new_isr_incarnations.get(broker) != state.brokers[broker].incarnation
        )
        if stale:  # the leader judged them on fetches of a life that is over (KIP-903)
            return None, isr_refusal(
                request,
                ErrorCode.INELIGIBLE_REPLICA,
                f"brokers {stale} joined on fetches of an earlier life",
                current(),
            )
        return record.changed(isr=new_isr, controller_epoch=self.role.epoch), None


def affected_by(removed: frozenset[int]) -> Callable[[PartitionStateRecord], bool]:
    """Partitions to re-elect after broker changes: led by or replicated on a removed broker, or offline."""

    def affected(state: PartitionStateRecord) -> bool:
        return state.leader in removed or state.leader == -1 or any(broker in removed for broker in state.isr)

    return affected


def isr_refusal(
    request: controller_pb2.PartitionIsrChange,
    code: ErrorCode,
    message: str,
    state: common_pb2.PartitionState | None = None,
) -> controller_pb2.PartitionIsrResult:
    return controller_pb2.PartitionIsrResult(
        topic=request.topic, partition=request.partition, error_code=int(code), error_message=message, state=state
    )
