"""AlterPartition requests committed together (a group commit): requests that arrive while the
controller is busy — a restart's ISR expansions come from every leader at once, a few thousand
changes each in requests of ISR_CHANGES_PER_REQUEST — wait for the controller's lock, and the one
that gets it commits everything waiting then in one `write_states` and one push, instead of one
etcd round and one push per request, one after another.

The commit runs in a task of its own: a caller whose deadline passes (gRPC cancels its handler)
abandons its wait, not the commit of the others' changes. A term that ends meanwhile fails the
waiting requests with NOT_CONTROLLER (the commit checks the role first), as it did one at a time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from tidelog.common.errors import ErrorCode
from tidelog.controller.partition_leadership import isr_refusal
from tidelog.server_common.metadata import PartitionStateRecord
from tidelog.v1 import controller_pb2

__all__ = ["IsrCommits", "merged_isr_changes"]

Request = controller_pb2.AlterPartitionRequest
Response = controller_pb2.AlterPartitionResponse
Judged = tuple[PartitionStateRecord | None, controller_pb2.PartitionIsrResult | None]  # the next state, or a refusal
IsrChange = Callable[[int, controller_pb2.PartitionIsrChange], Judged]


class IsrCommits:
    def __init__(self, mutex: asyncio.Lock, commit: Callable[[list[Request]], Awaitable[list[Response]]]) -> None:
        self._mutex = mutex  # the controller's: every metadata change takes it
        self._commit = commit  # under the mutex: a response per request, in order
        self._waiting: list[tuple[Request, asyncio.Future[Response]]] = []
        self._draining: asyncio.Task[None] | None = None

    async def submit(self, request: Request) -> Response:
        future: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        self._waiting.append((request, future))
        if self._draining is None or self._draining.done():
            self._draining = asyncio.create_task(self._drain(), name="isr-commits")
        return await future

    async def _drain(self) -> None:
        while self._waiting:
            async with self._mutex:
                batch, self._waiting = self._waiting, []  # all that waited for the lock meanwhile
                try:
                    responses = await self._commit([request for request, _ in batch])
                except BaseException as error:
                    for _, future in batch:
                        if not future.done():
                            future.set_exception(error)
                    if not isinstance(error, Exception):
                        raise
                    continue
            assert len(responses) == len(batch), "a response per request"
            for (_, future), response in zip(batch, responses, strict=True):
                if not future.done():  # (not a caller that gave up)
                    future.set_result(response)


def merged_isr_changes(
    requests: list[Request], isr_change: IsrChange
) -> tuple[dict[tuple[str, int], PartitionStateRecord], list[Response]]:
    """The accepted changes of every request, to commit together, and a response per request (its
    refusals and, for now, an empty result per accepted change). A partition named again after
    one request's change of it was accepted is refused; one another request of the same commit
    changes, too (judged on a state
    going away: its leader asks again with the state it gets)."""
    changes: dict[tuple[str, int], PartitionStateRecord] = {}
    responses = []
    for request in requests:
        results: list[controller_pb2.PartitionIsrResult] = []
        accepted: set[tuple[str, int]] = set()
        for change in request.partitions:
            key = (change.topic, change.partition)
            if key in accepted:
                results.append(isr_refusal(change, ErrorCode.INVALID_REQUEST, "the partition is named twice"))
                continue
            if key in changes:
                results.append(isr_refusal(change, ErrorCode.INVALID_UPDATE_VERSION, "changed by another request"))
                continue
            next_state, refused = isr_change(request.broker_id, change)
            if refused is not None:
                results.append(refused)
                continue
            assert next_state is not None
            changes[key] = next_state
            accepted.add(key)
            results.append(controller_pb2.PartitionIsrResult(topic=change.topic, partition=change.partition))
        responses.append(Response(partitions=results))
    return changes, responses
