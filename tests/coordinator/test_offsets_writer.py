"""The fenced writer of `__consumer_offsets` when an append is cut short.

The broker here is a stand-in that keeps the batches it took and answers sequences with the real
ProducerStateManager (the broker's own idempotence checks); the cluster tests use real brokers.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.waiting import until
from tidelog.broker.storage.producer_state import ProducerStateManager
from tidelog.common.errors import ErrorCode, RemoteError
from tidelog.common.record.batch_layout import read_header
from tidelog.coordinator.offsets_writer import FencedOffsetsWriter
from tidelog.v1 import broker_pb2


class Broker:
    """Appends each new batch at once, then holds its acknowledgement until `acks` is set."""

    def __init__(self, directory: Path) -> None:
        self.state = ProducerStateManager(directory)
        self.log: list[bytes] = []
        self.acks = asyncio.Event()
        self.acks.set()

    async def Produce(self, request: broker_pb2.ProduceRequest, timeout: float) -> broker_pb2.ProduceResponse:  # noqa: N802
        batch = request.partitions[0].record_batches
        header = read_header(batch)
        duplicate = self.state.check([header])
        if duplicate is None:
            base_offset = sum(read_header(stored).last_offset_delta + 1 for stored in self.log)
            self.state.update(header._replace(base_offset=base_offset))
            self.log.append(batch)
        else:
            base_offset = duplicate.first_offset
        await self.acks.wait()
        return broker_pb2.ProduceResponse(partitions=[broker_pb2.ProducePartitionResult(base_offset=base_offset)])


class Metadata:
    def __init__(self) -> None:
        self.partitions: dict[str, Any] = {"__consumer_offsets": []}

    def leader_endpoint(self, topic: str, partition: int) -> str:
        return "broker"

    async def refresh(self, topics: list[str]) -> None:
        pass


class Connections:
    def __init__(self, broker: Broker) -> None:
        self._broker = broker

    def broker(self, endpoint: str) -> Broker:
        return self._broker


def commit(partition: int) -> list[tuple[bytes, bytes | None]]:
    return [(b"group/topic/%d" % partition, b"offset")] * 3


async def test_an_append_cut_short_leaves_its_sequence_to_no_one_and_the_partition_broken(tmp_path: Path) -> None:
    broker = Broker(tmp_path)
    writer = FencedOffsetsWriter(Metadata(), Connections(broker))  # type: ignore[arg-type]
    writer.own(4, epoch=1)
    await writer.append(4, commit(0))
    # A commit whose client went away: its batch is in the log, its acknowledgement never read.
    broker.acks.clear()
    cut = asyncio.create_task(writer.append(4, commit(1)))
    queued = asyncio.create_task(writer.append(4, commit(2)))  # waits for the partition's one append
    await until(lambda: len(broker.log) == 2)
    cut.cancel()
    broker.acks.set()
    # Sent under the cut one's sequence, the queued batch (as many records) would be answered as
    # its duplicate: acknowledged, and in no log.
    with pytest.raises(RemoteError) as refused:
        await queued
    assert refused.value.code == ErrorCode.NOT_COORDINATOR
    assert cut.cancelled()
    assert len(broker.log) == 2
    assert writer.broken() == [4]  # the ownership loop gives it up; the next owner loads the log


async def test_a_write_that_lands_after_its_partition_changed_hands_is_not_reported_written(tmp_path: Path) -> None:
    broker = Broker(tmp_path)
    writer = FencedOffsetsWriter(Metadata(), Connections(broker))  # type: ignore[arg-type]
    writer.own(4, epoch=1)
    broker.acks.clear()
    late = asyncio.create_task(writer.append(4, commit(0)))
    await until(lambda: len(broker.log) == 1)
    writer.disown(4)  # lost (and maybe claimed again): the next load replays the batch
    writer.own(4, epoch=2)
    broker.acks.set()
    with pytest.raises(RemoteError) as refused:
        await late
    assert refused.value.code == ErrorCode.NOT_COORDINATOR
    await writer.append(4, commit(1))  # the new ownership writes with its own epoch from sequence 0
    assert [read_header(batch).producer_epoch for batch in broker.log] == [1, 2]
