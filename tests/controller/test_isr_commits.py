"""AlterPartition requests that wait for the controller's lock are committed together."""

from __future__ import annotations

import asyncio

import pytest

from tidelog.common.errors import ErrorCode, NotControllerError
from tidelog.controller.isr_commits import IsrCommits, merged_isr_changes
from tidelog.server_common.metadata import PartitionStateRecord
from tidelog.v1 import controller_pb2


def _request(broker: int, *partitions: int) -> controller_pb2.AlterPartitionRequest:
    return controller_pb2.AlterPartitionRequest(
        broker_id=broker,
        partitions=[controller_pb2.PartitionIsrChange(topic="t", partition=p, new_isr=[1, 2]) for p in partitions],
    )


class _Commits:
    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.release = asyncio.Event()
        self.fail: BaseException | None = None

    async def commit(
        self, requests: list[controller_pb2.AlterPartitionRequest]
    ) -> list[controller_pb2.AlterPartitionResponse]:
        self.batches.append([request.broker_id for request in requests])
        await self.release.wait()
        if self.fail is not None:
            raise self.fail
        return [controller_pb2.AlterPartitionResponse(partitions=[]) for _ in requests]


async def test_requests_waiting_for_the_lock_are_committed_in_one_batch() -> None:
    mutex = asyncio.Lock()
    commits = _Commits()
    isr_commits = IsrCommits(mutex, commits.commit)
    async with mutex:  # the controller busy elsewhere (a push, a controlled shutdown)
        calls = [asyncio.ensure_future(isr_commits.submit(_request(broker))) for broker in (1, 2, 3)]
        await asyncio.sleep(0.01)
        assert commits.batches == []
    commits.release.set()
    responses = await asyncio.gather(*calls)
    assert len(responses) == 3
    assert commits.batches == [[1, 2, 3]], "one commit for the three"


async def test_a_caller_that_gives_up_leaves_the_others_commit_alone() -> None:
    commits = _Commits()
    isr_commits = IsrCommits(asyncio.Lock(), commits.commit)
    first = asyncio.ensure_future(isr_commits.submit(_request(1)))
    await asyncio.sleep(0.01)  # under way: its commit waits on `release`
    second = asyncio.ensure_future(isr_commits.submit(_request(2)))  # waits for the next batch
    first.cancel()  # its deadline passed
    commits.release.set()
    assert (await second).partitions == []
    assert commits.batches == [[1], [2]]  # the first commit ran to its end, then the second


async def test_a_failed_commit_fails_every_request_of_it() -> None:
    mutex = asyncio.Lock()
    commits = _Commits()
    commits.fail = NotControllerError("not the active controller any more")
    isr_commits = IsrCommits(mutex, commits.commit)
    async with mutex:
        calls = [asyncio.ensure_future(isr_commits.submit(_request(broker))) for broker in (1, 2)]
        await asyncio.sleep(0.01)
    commits.release.set()
    for call in calls:
        with pytest.raises(NotControllerError):
            await call


def test_merged_changes_refuse_a_partition_named_twice_or_changed_by_another_request() -> None:
    def accept(broker: int, change: controller_pb2.PartitionIsrChange) -> tuple[PartitionStateRecord, None]:
        state = PartitionStateRecord(
            leader=broker, isr=[broker, 3], leader_epoch=1, partition_epoch=2, controller_epoch=1
        )
        return state, None

    changes, responses = merged_isr_changes([_request(1, 0, 1, 0), _request(2, 1, 2)], accept)
    assert sorted(changes) == [("t", 0), ("t", 1), ("t", 2)]
    assert changes[("t", 1)].leader == 1  # the first request's
    codes = [[result.error_code for result in response.partitions] for response in responses]
    assert codes == [[0, 0, ErrorCode.INVALID_REQUEST], [ErrorCode.INVALID_UPDATE_VERSION, 0]]
