"""TxnOffsetCommit (KIP-98, with KIP-447's fencing by group generation): a consumer group's offsets
committed inside a producer's transaction, so consuming and producing commit or abort together.

The handler checks the committer as an OffsetCommit's (group_coordinator.committing_group: its
member id and generation, when given), writes the offsets to the group's `__consumer_offsets`
partition as the producer's own transactional batch, and holds them pending (group_replay's
`pend_txn_offset`). The transaction coordinator then writes the producer's marker into that
partition (AddOffsetsToTxn added it to the transaction): `complete`, driven by the partition's
tail (main.py), applies the offsets on COMMIT and drops them on ABORT. Meanwhile an OffsetFetch
with `require_stable` answers UNSTABLE_OFFSET_COMMIT for them.
"""

from __future__ import annotations

from typing import Protocol

from tidelog.coordinator.group_coordinator import GroupCoordinator
from tidelog.coordinator.group_replay import Record, complete_txn_offsets, offset_commit_records, pend_txn_offset
from tidelog.v1 import coordinator_pb2

__all__ = ["TxnOffsetCommits"]


class TransactionalOffsetsWriter(Protocol):
    async def append_transactional(
        self, partition: int, records: list[Record], producer_id: int, producer_epoch: int
    ) -> None: ...


class TxnOffsetCommits:
    def __init__(self, groups: GroupCoordinator, writer: TransactionalOffsetsWriter) -> None:
        self.groups = groups
        self.writer = writer

    async def commit(self, request: coordinator_pb2.TxnOffsetCommitRequest) -> coordinator_pb2.OffsetCommitResponse:
        groups = self.groups
        group = groups.committing_group(
            request.group_id, request.generation_id, request.member_id, request.group_instance_id, transactional=True
        )
        response, records = offset_commit_records(group.group_id, request.partitions, groups.clock_ms())
        if not records:
            return response
        partition = groups.partition_of(request.group_id)

        async def write_then_pend() -> None:
            await self.writer.append_transactional(partition, records, request.producer_id, request.producer_epoch)
            loaded = groups.groups.get(partition)
            if loaded is not None and partition not in groups.loading:
                for key, value in records:
                    pend_txn_offset(loaded, request.producer_id, key, value)

        await groups.writes.run(write_then_pend())
        return response

    def complete(self, partition: int, producer_id: int, *, commit: bool) -> None:
        """The producer's marker is in the partition: its pending offsets count, or go."""
        loaded = self.groups.groups.get(partition)
        if loaded is not None:
            complete_txn_offsets(loaded, producer_id, commit=commit)
