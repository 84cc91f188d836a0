"""The coordinator's gRPC service (proto/tidelog/v1/coordinator.proto) over a GroupCoordinator.

Errors come back as Kafka's codes in the response; NOT_COORDINATOR tells the client to look the
group up again (FindCoordinator), COORDINATOR_LOAD_IN_PROGRESS to retry shortly.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeAlias, TypeVar

import grpc

from tidelog.client.connections import Connections
from tidelog.common.errors import (
    ErrorCode,
    GroupAuthorizationFailedError,
    TidelogError,
    TopicAuthorizationFailedError,
)
from tidelog.common.security.authorization.acl import CLUSTER_NAME, Operation, ResourceType
from tidelog.common.settings import SecuritySettings
from tidelog.coordinator.group_coordinator import GroupCoordinator
from tidelog.coordinator.partition_ownership import PartitionOwnership
from tidelog.coordinator.txn_offsets import TxnOffsetCommits
from tidelog.server_common import metrics_catalog
from tidelog.server_common.metadata import CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, offsets_partition_for
from tidelog.server_common.security.authorization.access_control import AccessControl
from tidelog.v1 import coordinator_pb2, coordinator_pb2_grpc

__all__ = ["CoordinatorService", "answered"]

REQUESTS = metrics_catalog.counter("tidelog_coordinator_requests_total")
LATENCY = metrics_catalog.histogram(
    "tidelog_coordinator_request_seconds", buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30, 300)
)
Context: TypeAlias = "grpc.aio.ServicerContext[Any, Any]"
R = TypeVar("R")


async def answered(api: str, response: R, work: Callable[[], Awaitable[R]]) -> R:
    """`work()`'s answer, or `response` holding the error it raised as Kafka's code; counted and
    timed by request name (the group and transaction coordinators' services share it)."""
    started = time.perf_counter()
    try:
        result = await work()
        REQUESTS.labels(api, "NONE").inc()
        return result
    except TidelogError as error:
        REQUESTS.labels(api, error.code.name).inc()
        response.error_code = int(error.code)  # type: ignore[attr-defined]
        response.error_message = error.message  # type: ignore[attr-defined]
        return response
    finally:
        LATENCY.labels(api).observe(time.perf_counter() - started)


class CoordinatorService(coordinator_pb2_grpc.CoordinatorServicer):
    def __init__(
        self,
        coordinator: GroupCoordinator,
        ownership: PartitionOwnership,
        connections: Connections,
        txn_offsets: TxnOffsetCommits,
        access: AccessControl | None = None,
    ) -> None:
        self.coordinator = coordinator
        self.txn_offsets = txn_offsets
        self.ownership = ownership
        self.transaction_partitions = coordinator.config.transaction_state_log_num_partitions
        self.connections = connections
        self.access = access or AccessControl(SecuritySettings.from_configs())

    def _group_refusal(self, context: Context, operation: Operation, group_id: str) -> TidelogError | None:
        if not self.access.enabled:
            return None
        caller = self.access.caller(context)
        if self.access.allowed(caller, operation, ResourceType.GROUP, group_id):
            return None
        return GroupAuthorizationFailedError(f"{caller} may not {operation.value} group {group_id!r}")

    async def _group_call(  # noqa: PLR0917 - the request's parts, in the order they are checked
        self,
        api: str,
        context: Context,
        operation: Operation,
        group_id: str,
        response: R,
        work: Callable[[], Awaitable[R]],
    ) -> R:
        refusal = self._group_refusal(context, operation, group_id)
        if refusal is not None:

            async def refuse() -> R:
                raise refusal

            return await self._answer(api, response, refuse)
        return await self._answer(api, response, work)

    def _topics_refused(self, context: Context, operation: Operation, topics: set[str]) -> set[str]:
        if not self.access.enabled:
            return set()
        caller = self.access.caller(context)
        return {topic for topic in topics if not self.access.allowed(caller, operation, ResourceType.TOPIC, topic)}

    async def _answer(self, api: str, response: R, work: Callable[[], Awaitable[R]]) -> R:
        return await answered(api, response, work)

    async def FindCoordinator(  # noqa: N802
        self, request: coordinator_pb2.FindCoordinatorRequest, context: Context
    ) -> coordinator_pb2.FindCoordinatorResponse:
        if request.transactional_id:
            caller = self.access.caller(context) if self.access.enabled else None
            if caller is not None and not self.access.allowed(
                caller, Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, request.transactional_id
            ):
                return coordinator_pb2.FindCoordinatorResponse(
                    error_code=int(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
                    error_message=f"{caller} may not Describe transactional.id {request.transactional_id!r}",
                )
            topic = TRANSACTION_STATE_TOPIC
            partition = offsets_partition_for(request.transactional_id, self.transaction_partitions)
        else:
            if refusal := self._group_refusal(context, Operation.DESCRIBE, request.group_id):
                return coordinator_pb2.FindCoordinatorResponse(
                    error_code=int(refusal.code), error_message=refusal.message
                )
            topic = CONSUMER_OFFSETS_TOPIC
            partition = self.coordinator.partition_of(request.group_id)
        owned = self.ownership.topics.get(topic)
        claim = owned.claims.get(partition) if owned is not None else None
        if claim is None:
            return coordinator_pb2.FindCoordinatorResponse(
                error_code=int(ErrorCode.COORDINATOR_NOT_AVAILABLE),
                error_message=f"no coordinator serves {topic}-{partition} yet",
                partition=partition,
            )
        return coordinator_pb2.FindCoordinatorResponse(endpoint=claim.endpoint, partition=partition)

    async def JoinGroup(  # noqa: N802
        self, request: coordinator_pb2.JoinGroupRequest, context: Context
    ) -> coordinator_pb2.JoinGroupResponse:
        return await self._group_call(
            "JoinGroup",
            context,
            Operation.READ,
            request.group_id,
            coordinator_pb2.JoinGroupResponse(),
            lambda: self.coordinator.join_group(request),
        )

    async def SyncGroup(  # noqa: N802
        self, request: coordinator_pb2.SyncGroupRequest, context: Context
    ) -> coordinator_pb2.SyncGroupResponse:
        return await self._group_call(
            "SyncGroup",
            context,
            Operation.READ,
            request.group_id,
            coordinator_pb2.SyncGroupResponse(),
            lambda: self.coordinator.sync_group(request),
        )

    async def Heartbeat(  # noqa: N802
        self, request: coordinator_pb2.HeartbeatRequest, context: Context
    ) -> coordinator_pb2.HeartbeatResponse:
        async def work() -> coordinator_pb2.HeartbeatResponse:
            return self.coordinator.heartbeat(request)

        return await self._group_call(
            "Heartbeat", context, Operation.READ, request.group_id, coordinator_pb2.HeartbeatResponse(), work
        )

    async def LeaveGroup(  # noqa: N802
        self, request: coordinator_pb2.LeaveGroupRequest, context: Context
    ) -> coordinator_pb2.LeaveGroupResponse:
        async def work() -> coordinator_pb2.LeaveGroupResponse:
            return self.coordinator.leave_group(request)

        return await self._group_call(
            "LeaveGroup", context, Operation.READ, request.group_id, coordinator_pb2.LeaveGroupResponse(), work
        )

    async def OffsetCommit(  # noqa: N802
        self, request: coordinator_pb2.OffsetCommitRequest, context: Context
    ) -> coordinator_pb2.OffsetCommitResponse:
        refused = self._topics_refused(context, Operation.READ, {entry.topic for entry in request.partitions})
        if refused:
            # Kafka commits the authorised partitions and fails the others; a commit here is one
            # record batch, so it is refused whole and says which topics.
            async def refuse() -> coordinator_pb2.OffsetCommitResponse:
                raise TopicAuthorizationFailedError(f"may not Read topic(s) {sorted(refused)}")

            return await self._group_call(
                "OffsetCommit",
                context,
                Operation.READ,
                request.group_id,
                coordinator_pb2.OffsetCommitResponse(),
                refuse,
            )
        return await self._group_call(
            "OffsetCommit",
            context,
            Operation.READ,
            request.group_id,
            coordinator_pb2.OffsetCommitResponse(),
            lambda: self.coordinator.commit_offsets(request),
        )

    async def TxnOffsetCommit(  # noqa: N802
        self, request: coordinator_pb2.TxnOffsetCommitRequest, context: Context
    ) -> coordinator_pb2.OffsetCommitResponse:
        """As Kafka's: Read on the group and each topic, Write on the transactional.id."""
        refused = self._topics_refused(context, Operation.READ, {entry.topic for entry in request.partitions})
        if not refused and self.access.enabled:
            caller = self.access.caller(context)
            if not self.access.allowed(
                caller, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id
            ):
                refused = {f"transactional.id {request.transactional_id!r}"}

        async def work() -> coordinator_pb2.OffsetCommitResponse:
            if refused:
                raise TopicAuthorizationFailedError(f"may not commit: {sorted(refused)}")
            return await self.txn_offsets.commit(request)

        return await self._group_call(
            "TxnOffsetCommit", context, Operation.READ, request.group_id, coordinator_pb2.OffsetCommitResponse(), work
        )

    async def OffsetFetch(  # noqa: N802
        self, request: coordinator_pb2.OffsetFetchRequest, context: Context
    ) -> coordinator_pb2.OffsetFetchResponse:
        async def work() -> coordinator_pb2.OffsetFetchResponse:
            response = self.coordinator.fetch_offsets(request)
            hidden = self._topics_refused(context, Operation.DESCRIBE, {entry.topic for entry in response.partitions})
            if hidden:  # as Kafka: offsets of topics the caller may not Describe are left out
                kept = [entry for entry in response.partitions if entry.topic not in hidden]
                del response.partitions[:]
                response.partitions.extend(kept)
            return response

        return await self._group_call(
            "OffsetFetch", context, Operation.DESCRIBE, request.group_id, coordinator_pb2.OffsetFetchResponse(), work
        )

    async def ListGroups(  # noqa: N802
        self, request: coordinator_pb2.ListGroupsRequest, context: Context
    ) -> coordinator_pb2.ListGroupsResponse:
        groups = self.coordinator.list_groups()
        if not request.local_only:  # groups live on every instance: ask the others too
            others = {claim.endpoint for claim in self.ownership.claims.values()} - {self.ownership.instance.endpoint}
            local = coordinator_pb2.ListGroupsRequest(local_only=True)
            for endpoint in sorted(others):
                stub = coordinator_pb2_grpc.CoordinatorStub(self.connections.channel(endpoint))
                try:
                    answer: coordinator_pb2.ListGroupsResponse = await stub.ListGroups(local, timeout=5)
                    groups.extend(answer.groups)
                except grpc.aio.AioRpcError:
                    return coordinator_pb2.ListGroupsResponse(
                        error_code=int(ErrorCode.COORDINATOR_NOT_AVAILABLE), groups=groups
                    )
        groups.sort(key=lambda group: str(group.group_id))
        if self.access.enabled:  # Describe on the Cluster lists every group, else those it may Describe
            caller = self.access.caller(context)
            if not self.access.allowed(caller, Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
                groups = [
                    group
                    for group in groups
                    if self.access.allowed(caller, Operation.DESCRIBE, ResourceType.GROUP, group.group_id)
                ]
        return coordinator_pb2.ListGroupsResponse(groups=groups)

    async def DescribeGroups(  # noqa: N802
        self, request: coordinator_pb2.DescribeGroupsRequest, context: Context
    ) -> coordinator_pb2.DescribeGroupsResponse:
        return coordinator_pb2.DescribeGroupsResponse(
            groups=[
                self.coordinator.describe_group(group_id)
                if self._group_refusal(context, Operation.DESCRIBE, group_id) is None
                else coordinator_pb2.DescribedGroup(
                    group_id=group_id, error_code=int(ErrorCode.GROUP_AUTHORIZATION_FAILED)
                )
                for group_id in request.group_ids
            ]
        )

    async def DeleteGroups(  # noqa: N802
        self, request: coordinator_pb2.DeleteGroupsRequest, context: Context
    ) -> coordinator_pb2.DeleteGroupsResponse:
        response = coordinator_pb2.DeleteGroupsResponse()
        for group_id in request.group_ids:
            result = response.groups.add(group_id=group_id)
            if refusal := self._group_refusal(context, Operation.DELETE, group_id):
                result.error_code, result.error_message = int(refusal.code), refusal.message
                continue
            try:
                await self.coordinator.delete_group(group_id)
            except TidelogError as error:
                result.error_code, result.error_message = int(error.code), error.message
        return response
