"""Offsets committed inside transactions (TxnOffsetCommit): pending until the producer's marker,
unstable to OffsetFetch with require_stable meanwhile, fenced by generation (KIP-447), and rebuilt
by a reload from the stored batches and markers."""

from __future__ import annotations

import pytest

from tests.fake_clock import FakeClock
from tidelog.common.errors import ErrorCode, TidelogError
from tidelog.common.record.batch import decode_batch, encode_batch
from tidelog.common.record.control import ControlType, Marker, encode_marker
from tidelog.common.settings import CoordinatorSettings
from tidelog.coordinator.group_coordinator import GroupCoordinator
from tidelog.coordinator.txn_offsets import TxnOffsetCommits
from tidelog.v1 import coordinator_pb2

PRODUCER = 42


class RecordingWriter:
    """Offsets records, and the stored batches a reload would read (transactional ones too)."""

    def __init__(self) -> None:
        self.batches: list[bytes] = []

    async def append(self, partition: int, records: list[tuple[bytes, bytes | None]]) -> None:
        self.batches.append(encode_batch([v for _, v in records], keys=[k for k, _ in records]))

    async def append_transactional(
        self, partition: int, records: list[tuple[bytes, bytes | None]], producer_id: int, producer_epoch: int
    ) -> None:
        values, keys = [v for _, v in records], [k for k, _ in records]
        self.batches.append(
            encode_batch(values, keys=keys, producer_id=producer_id, producer_epoch=producer_epoch, transactional=True)
        )

    def marker(self, commit: bool) -> bytes:
        control = ControlType.COMMIT if commit else ControlType.ABORT
        self.batches.append(encode_marker(PRODUCER, 1, Marker(control, 0), timestamp=1))
        return self.batches[-1]


def _coordinator(writer: RecordingWriter) -> tuple[GroupCoordinator, TxnOffsetCommits]:
    settings = CoordinatorSettings.from_configs(
        {"offsets.topic.num.partitions": 1, "group.initial.rebalance.delay.ms": 0}
    )
    groups = GroupCoordinator(writer, settings, monotonic=FakeClock())
    groups.begin_loading(0)
    groups.finish_loading(0)
    return groups, TxnOffsetCommits(groups, writer)


def _commit(offset: int, *, generation_id: int = -1, member_id: str = "") -> coordinator_pb2.TxnOffsetCommitRequest:
    return coordinator_pb2.TxnOffsetCommitRequest(
        transactional_id="tx",
        group_id="g",
        producer_id=PRODUCER,
        producer_epoch=0,
        generation_id=generation_id,
        member_id=member_id,
        partitions=[coordinator_pb2.OffsetCommitPartition(topic="in", partition=0, offset=offset)],
    )


def _fetch(groups: GroupCoordinator, *, stable: bool) -> list[tuple[int, int]]:
    request = coordinator_pb2.OffsetFetchRequest(
        group_id="g", partitions=[coordinator_pb2.OffsetCommitPartition(topic="in", partition=0)], require_stable=stable
    )
    return [(entry.offset, entry.error_code) for entry in groups.fetch_offsets(request).partitions]


async def test_offsets_of_a_transaction_count_once_it_commits_and_never_if_it_aborts() -> None:
    writer = RecordingWriter()
    groups, txn_offsets = _coordinator(writer)
    await groups.commit_offsets(
        coordinator_pb2.OffsetCommitRequest(
            group_id="g", generation_id=-1, partitions=[coordinator_pb2.OffsetCommitPartition(topic="in", offset=5)]
        )
    )
    await txn_offsets.commit(_commit(9))
    assert _fetch(groups, stable=False) == [(5, 0)]
    assert _fetch(groups, stable=True) == [(5, ErrorCode.UNSTABLE_OFFSET_COMMIT)]
    writer.marker(commit=False)
    txn_offsets.complete(0, PRODUCER, commit=False)
    assert _fetch(groups, stable=True) == [(5, 0)]
    await txn_offsets.commit(_commit(12))
    writer.marker(commit=True)
    txn_offsets.complete(0, PRODUCER, commit=True)
    assert _fetch(groups, stable=True) == [(12, 0)]
    # A new owner's load reads the same batches and markers, and ends up the same.
    reloaded, _ = _coordinator(RecordingWriter())
    for batch in writer.batches:
        reloaded.replay(0, decode_batch(batch))
    assert _fetch(reloaded, stable=True) == [(12, 0)]


async def test_a_reload_holds_an_open_transactions_offsets_as_pending() -> None:
    writer = RecordingWriter()
    _, txn_offsets = _coordinator(writer)
    await txn_offsets.commit(_commit(3))
    reloaded, _ = _coordinator(RecordingWriter())
    for batch in writer.batches:
        reloaded.replay(0, decode_batch(batch))
    assert _fetch(reloaded, stable=True) == [(-1, ErrorCode.UNSTABLE_OFFSET_COMMIT)]
    reloaded.replay(0, decode_batch(writer.marker(commit=True)))  # the marker arrives by the tail
    assert _fetch(reloaded, stable=True) == [(3, 0)]


async def test_a_member_of_an_older_generation_cannot_commit_in_a_transaction() -> None:
    groups, txn_offsets = _coordinator(RecordingWriter())
    joined = await groups.join_group(
        coordinator_pb2.JoinGroupRequest(
            group_id="g",
            session_timeout_ms=10_000,
            rebalance_timeout_ms=5_000,
            protocol_type="consumer",
            protocols=[coordinator_pb2.Protocol(name="range", metadata=b"m")],
            client_id="c",
        )
    )
    await groups.sync_group(
        coordinator_pb2.SyncGroupRequest(
            group_id="g", generation_id=joined.generation_id, member_id=joined.member_id, assignments=[]
        )
    )
    await txn_offsets.commit(_commit(1, generation_id=joined.generation_id, member_id=joined.member_id))
    with pytest.raises(TidelogError) as raised:
        await txn_offsets.commit(_commit(2, generation_id=joined.generation_id - 1, member_id=joined.member_id))
    assert raised.value.code == ErrorCode.ILLEGAL_GENERATION
    with pytest.raises(TidelogError) as raised:
        await txn_offsets.commit(_commit(2, generation_id=joined.generation_id, member_id="someone-else"))
    assert raised.value.code == ErrorCode.UNKNOWN_MEMBER_ID
