"""Which coordinator instance serves which partitions of `__consumer_offsets` and of
`__transaction_state` (docs/coordinator.md): each topic an `OwnedTopic`, claimed the same way under
its own etcd prefix.

Instances register `/tidelog/coordinators/instances/{id}` under a lease. Partition p belongs to
the live instance with the highest rendezvous hash of (instance, p), so every instance computes
the same split from the same member list, and an instance joining or leaving moves only its share.
An instance claims a partition by creating `/tidelog/coordinators/partitions/{p}/owner` under its
lease, in the same transaction that bumps `.../{p}/epoch`: the claim epoch, which is also the
producer epoch it writes the partition with (offsets_writer.py), so the previous owner is fenced
at the broker. A claim vanishes with its owner's lease; an instance gives up partitions it should
no longer own (or whose writer broke) by deleting the claim.

The loop polls etcd every `POLL_S` (a handful of keys); takeover after a crash is bounded by the
session timeout plus one poll.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Awaitable, Callable
from typing import Final

import structlog
from etcd3aio import Etcd3Client, prefix_range_end
from etcd3aio.kv import KVService

from tidelog.server_common.etcd.session import ETCD_UNREACHABLE, Session, new_session
from tidelog.server_common.metadata import (
    CONSUMER_OFFSETS_TOPIC,
    COORDINATOR_INSTANCES_PREFIX,
    CoordinatorClaimRecord,
    CoordinatorInstanceRecord,
    coordinator_claim_key,
    coordinator_epoch_key,
    coordinator_owner_of,
)

__all__ = ["OwnedTopic", "PartitionOwnership"]

log = structlog.get_logger(__name__)

POLL_S: Final = 0.25


@dataclasses.dataclass(slots=True)
class OwnedTopic:
    """A topic whose partitions the coordinator instances share, and what owning one means."""

    name: str
    claims_prefix: str  # in etcd: {prefix}{p}/owner (the claim, under the owner's lease), {prefix}{p}/epoch
    partition_count: int
    gained: Callable[[int, int], Awaitable[bool]]  # (partition, epoch) → loaded and serving?
    lost: Callable[[int], Awaitable[None]]
    broken: Callable[[], list[int]]
    owned: set[int] = dataclasses.field(default_factory=set)
    claims: dict[int, CoordinatorClaimRecord] = dataclasses.field(default_factory=dict)  # as last seen

    def claim_key(self, partition: int) -> str:
        return coordinator_claim_key(partition, self.claims_prefix)

    def epoch_key(self, partition: int) -> str:
        return coordinator_epoch_key(partition, self.claims_prefix)


class PartitionOwnership:
    def __init__(
        self, etcd: Etcd3Client, instance: CoordinatorInstanceRecord, topics: list[OwnedTopic], *, ttl_s: int
    ) -> None:
        self.etcd = etcd
        self.instance = instance
        self.topics = {topic.name: topic for topic in topics}
        self.ttl_s = ttl_s
        self.session: Session | None = None

    @property
    def claims(self) -> dict[int, CoordinatorClaimRecord]:
        """The owners of __consumer_offsets' partitions, as last seen."""
        return self.topics[CONSUMER_OFFSETS_TOPIC].claims

    @property
    def kv(self) -> KVService:
        assert self.etcd.kv is not None
        return self.etcd.kv

    async def run(self) -> None:
        while True:
            holder = f"coordinator-{self.instance.instance_id}"
            self.session = await new_session(self.etcd, ttl_s=self.ttl_s, holder=holder)
            key = f"{COORDINATOR_INSTANCES_PREFIX}{self.instance.instance_id}"
            try:
                await self.kv.put(key, self.instance.to_json(), lease=self.session.lease_id)
            except ETCD_UNREACHABLE as error:  # etcd gone again: retry
                log.info("coordinator_register_retry", instance=self.instance.instance_id, error=repr(error))
                await self.session.close(revoke=False)
                continue
            log.info("coordinator_registered", instance=self.instance.instance_id)
            try:
                while not self.session.done.is_set():
                    try:
                        await self._step()
                    except ETCD_UNREACHABLE as error:  # etcd slow or unreachable: the session says when to stop
                        log.info("coordinator_step_failed", instance=self.instance.instance_id, error=repr(error))
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self.session.done.wait(), POLL_S)
            finally:
                await self._lose_all()
            log.warning("coordinator_session_lost", instance=self.instance.instance_id)

    async def _lose_all(self) -> None:
        for topic in self.topics.values():
            for partition in sorted(topic.owned):
                await topic.lost(partition)
            topic.owned.clear()

    async def _step(self) -> None:
        assert self.session is not None
        prefix = COORDINATOR_INSTANCES_PREFIX.encode()
        instances = sorted(
            CoordinatorInstanceRecord.from_json(kv.value).instance_id
            for kv in (await self.kv.get(prefix, prefix_range_end(prefix))).kvs
        )
        for topic in self.topics.values():
            await self._step_topic(topic, instances)

    async def _step_topic(self, topic: OwnedTopic, instances: list[int]) -> None:
        assert self.session is not None
        claims_prefix = topic.claims_prefix.encode()
        claims: dict[int, CoordinatorClaimRecord] = {}
        epochs: dict[int, tuple[int, int]] = {}  # partition → (epoch, version)
        for kv in (await self.kv.get(claims_prefix, prefix_range_end(claims_prefix))).kvs:
            name = kv.key.decode()[len(topic.claims_prefix) :]
            partition_text, _, kind = name.partition("/")
            if kind == "owner":
                claims[int(partition_text)] = CoordinatorClaimRecord.from_json(kv.value)
            elif kind == "epoch":
                epochs[int(partition_text)] = (int(kv.value), int(kv.version))
        topic.claims = claims
        me = self.instance.instance_id
        if me not in instances:
            return  # our registration is not visible yet
        broken = set(topic.broken())
        for partition in sorted(topic.owned):
            claim = claims.get(partition)
            mine = claim is not None and claim.instance_id == me
            wanted = coordinator_owner_of(partition, instances) == me
            if not mine or not wanted or partition in broken:
                topic.owned.discard(partition)
                await topic.lost(partition)
                if mine:
                    await self.kv.delete(topic.claim_key(partition))
                    claims.pop(partition, None)
                log.info("coordinator_partition_released", topic=topic.name, partition=partition, still_wanted=wanted)
        for partition in range(topic.partition_count):
            if partition in topic.owned or partition in claims or coordinator_owner_of(partition, instances) != me:
                continue
            epoch, version = epochs.get(partition, (-1, 0))
            claim = CoordinatorClaimRecord(me, self.instance.endpoint, epoch + 1)
            response = await self.kv.txn(
                compare=[
                    KVService.txn_compare_create_revision(topic.claim_key(partition), 0),
                    KVService.txn_compare_version(topic.epoch_key(partition), version),
                ],
                success=[
                    KVService.txn_op_put(topic.claim_key(partition), claim.to_json(), lease=self.session.lease_id),
                    KVService.txn_op_put(topic.epoch_key(partition), str(claim.epoch).encode()),
                ],
            )
            if not response.succeeded:
                continue
            topic.owned.add(partition)
            topic.claims[partition] = claim
            log.info("coordinator_partition_claimed", topic=topic.name, partition=partition, epoch=claim.epoch)
            if not await topic.gained(partition, claim.epoch):
                topic.owned.discard(partition)
                await topic.lost(partition)
                await self.kv.delete(topic.claim_key(partition))

    async def close(self) -> None:
        """Give every partition up now (the lease goes), so others take over without a timeout."""
        await self._lose_all()
        if self.session is not None:
            await self.session.close(revoke=True)
