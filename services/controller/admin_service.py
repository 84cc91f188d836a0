"""The controller's gRPC admin API (proto/tidelog/v1/controller.proto).

Only the active controller acts; any other instance answers NOT_CONTROLLER with the active one's
endpoint. Per-topic problems come back per topic, with Kafka's error codes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol, TypeVar

from tidelog.common.errors import ErrorCode, InvalidRequestError, NotControllerError, TidelogError
from tidelog.common.security.authorization.acl import CLUSTER_NAME, Operation, ResourceType
from tidelog.common.settings import SecuritySettings
from tidelog.controller.controller import Controller
from tidelog.controller.security_apis import ADMIN_REQUESTS, Context, SecurityApis
from tidelog.server_common.security.authorization.access_control import AccessControl, Role
from tidelog.v1 import controller_pb2, controller_pb2_grpc

__all__ = ["AdminService"]

Request = TypeVar("Request")
Response = TypeVar("Response")


class _AnsweredWhole(Protocol):
    """A response that carries one error for the whole request (and where the active controller is)."""

    error_code: int
    controller_endpoint: str


Whole = TypeVar("Whole", bound=_AnsweredWhole)


class AdminService(SecurityApis, controller_pb2_grpc.ControllerServicer):
    """The Controller service: topics, partitions, leaders, reassignments and the cluster here;
    ACLs, SCRAM credentials and quotas from SecurityApis (security_apis.py)."""

    def __init__(self, controller: Controller, access: AccessControl | None = None) -> None:
        self.controller = controller
        self.access = access or AccessControl(SecuritySettings.from_configs())

    def _topic_refusals(
        self, context: Context, operation: Operation, names: list[str], *, cluster_allows: bool = False
    ) -> dict[str, controller_pb2.TopicResult]:
        """Results for the topics the caller may not `operation` (Create is also allowed by Create
        on the Cluster, as in Kafka)."""
        if not self.access.enabled:
            return {}
        caller = self.access.caller(context)
        if cluster_allows and self.access.allowed(caller, operation, ResourceType.CLUSTER, CLUSTER_NAME):
            return {}
        return {
            name: controller_pb2.TopicResult(
                name=name,
                error_code=int(ErrorCode.TOPIC_AUTHORIZATION_FAILED),
                error_message=f"{caller} may not {operation.value} topic {name!r}",
            )
            for name in set(names)
            if not self.access.allowed(caller, operation, ResourceType.TOPIC, name)
        }

    async def _authorised_topics(
        self,
        method: str,
        context: Context,
        *,
        operation: Operation,
        handler: Callable[[Any], Awaitable[Sequence[controller_pb2.TopicResult]]],
        request: Any,
        field: str,
        name_of: Callable[[Any], str],
        response_type: Callable[..., Response],
        cluster_allows: bool = False,
    ) -> Response:
        """`_topics` for the entries the caller may touch; the others answer TOPIC_AUTHORIZATION_FAILED."""
        entries = list(getattr(request, field))
        refused = self._topic_refusals(context, operation, [name_of(e) for e in entries], cluster_allows=cluster_allows)
        if refused:
            allowed = type(request)()
            allowed.CopyFrom(request)
            del getattr(allowed, field)[:]
            getattr(allowed, field).extend(e for e in entries if name_of(e) not in refused)
            request = allowed
            ADMIN_REQUESTS.labels(method, "unauthorised").inc()
        kept = [name_of(e) for e in getattr(request, field)]
        if not kept:
            return response_type(topics=list(refused.values()))
        response = await self._topics(method, handler, request, response_type, kept)
        response.topics.extend(refused.values())  # type: ignore[attr-defined]  # (every topics response)
        return response

    async def _topics(
        self,
        method: str,
        handler: Callable[[Request], Awaitable[Sequence[controller_pb2.TopicResult]]],
        request: Request,
        response_type: Callable[..., Response],
        names: list[str],
    ) -> Response:
        try:
            results = await handler(request)
            ADMIN_REQUESTS.labels(method, "ok").inc()
            return response_type(topics=results)
        except NotControllerError as error:
            ADMIN_REQUESTS.labels(method, "not_controller").inc()
            endpoint = await self.controller.active_endpoint()
            return response_type(
                topics=[_result(name, error) for name in names],
                controller_endpoint="" if endpoint == self.controller.config.endpoint else endpoint,
            )
        except TidelogError as error:
            ADMIN_REQUESTS.labels(method, "error").inc()
            return response_type(topics=[_result(name, error) for name in names])

    async def CreateTopics(  # noqa: N802
        self, request: controller_pb2.CreateTopicsRequest, context: Context
    ) -> controller_pb2.CreateTopicsResponse:
        return await self._authorised_topics(
            "CreateTopics",
            context,
            operation=Operation.CREATE,
            handler=self.controller.create_topics,
            request=request,
            field="topics",
            name_of=lambda topic: topic.name,
            response_type=controller_pb2.CreateTopicsResponse,
            cluster_allows=True,
        )

    async def DeleteTopics(  # noqa: N802
        self, request: controller_pb2.DeleteTopicsRequest, context: Context
    ) -> controller_pb2.DeleteTopicsResponse:
        return await self._authorised_topics(
            "DeleteTopics",
            context,
            operation=Operation.DELETE,
            handler=self.controller.delete_topics,
            request=request,
            field="names",
            name_of=str,
            response_type=controller_pb2.DeleteTopicsResponse,
        )

    async def CreatePartitions(  # noqa: N802
        self, request: controller_pb2.CreatePartitionsRequest, context: Context
    ) -> controller_pb2.CreatePartitionsResponse:
        return await self._authorised_topics(
            "CreatePartitions",
            context,
            operation=Operation.ALTER,
            handler=self.controller.create_partitions,
            request=request,
            field="topics",
            name_of=lambda change: change.topic,
            response_type=controller_pb2.CreatePartitionsResponse,
        )

    async def AlterConfigs(  # noqa: N802
        self, request: controller_pb2.AlterConfigsRequest, context: Context
    ) -> controller_pb2.AlterConfigsResponse:
        return await self._authorised_topics(
            "AlterConfigs",
            context,
            operation=Operation.ALTER_CONFIGS,
            handler=self.controller.alter_configs,
            request=request,
            field="changes",
            name_of=lambda change: change.topic,
            response_type=controller_pb2.AlterConfigsResponse,
        )

    async def AlterPartition(  # noqa: N802
        self, request: controller_pb2.AlterPartitionRequest, context: Context
    ) -> controller_pb2.AlterPartitionResponse:
        if refusal := self._cluster_refusal(context, Role.BROKER):
            ADMIN_REQUESTS.labels("AlterPartition", "unauthorised").inc()
            return controller_pb2.AlterPartitionResponse(
                error_code=int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED), error_message=refusal
            )
        try:
            response = await self.controller.alter_partition(request)
            refused = any(result.error_code for result in response.partitions)
            ADMIN_REQUESTS.labels("AlterPartition", "error" if refused else "ok").inc()
            return response
        except InvalidRequestError as error:
            ADMIN_REQUESTS.labels("AlterPartition", "error").inc()
            return controller_pb2.AlterPartitionResponse(error_code=int(error.code), error_message=error.message)
        except NotControllerError as error:
            ADMIN_REQUESTS.labels("AlterPartition", "not_controller").inc()
            return controller_pb2.AlterPartitionResponse(
                error_code=int(error.code),
                error_message=error.message,
                controller_endpoint=await self.controller.active_endpoint(),
            )

    async def _whole(
        self,
        method: str,
        response: Whole,
        work: Callable[[], Awaitable[Whole]],
        refusal: str = "",
    ) -> Whole:
        """Requests answered as a whole: CLUSTER_AUTHORIZATION_FAILED (`refusal`), NOT_CONTROLLER
        (with the active endpoint), or the result."""
        if refusal:
            ADMIN_REQUESTS.labels(method, "unauthorised").inc()
            response.error_code = int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
            if hasattr(response, "error_message"):
                response.error_message = refusal
            return response
        try:
            result = await work()
            ADMIN_REQUESTS.labels(method, "ok").inc()
            return result
        except NotControllerError as error:
            ADMIN_REQUESTS.labels(method, "not_controller").inc()
            response.error_code = int(error.code)
            response.controller_endpoint = await self.controller.active_endpoint()
            return response
        except TidelogError as error:
            ADMIN_REQUESTS.labels(method, "error").inc()
            response.error_code = int(error.code)
            if hasattr(response, "error_message"):
                response.error_message = error.message
            return response

    async def ElectLeaders(  # noqa: N802
        self, request: controller_pb2.ElectLeadersRequest, context: Context
    ) -> controller_pb2.ElectLeadersResponse:
        async def work() -> controller_pb2.ElectLeadersResponse:
            return controller_pb2.ElectLeadersResponse(partitions=await self.controller.elect_leaders(request))

        return await self._whole(
            "ElectLeaders", controller_pb2.ElectLeadersResponse(), work, self._cluster_refusal(context, Operation.ALTER)
        )

    async def AlterPartitionReassignments(  # noqa: N802
        self, request: controller_pb2.AlterPartitionReassignmentsRequest, context: Context
    ) -> controller_pb2.AlterPartitionReassignmentsResponse:
        async def work() -> controller_pb2.AlterPartitionReassignmentsResponse:
            results = await self.controller.alter_reassignments(request)
            return controller_pb2.AlterPartitionReassignmentsResponse(partitions=results)

        return await self._whole(
            "AlterPartitionReassignments",
            controller_pb2.AlterPartitionReassignmentsResponse(),
            work,
            self._cluster_refusal(context, Operation.ALTER),
        )

    async def ListPartitionReassignments(  # noqa: N802
        self, request: controller_pb2.ListPartitionReassignmentsRequest, context: Context
    ) -> controller_pb2.ListPartitionReassignmentsResponse:
        async def work() -> controller_pb2.ListPartitionReassignmentsResponse:
            return controller_pb2.ListPartitionReassignmentsResponse(
                reassignments=self.controller.ongoing_reassignments()
            )

        return await self._whole(
            "ListPartitionReassignments",
            controller_pb2.ListPartitionReassignmentsResponse(),
            work,
            self._cluster_refusal(context, Operation.DESCRIBE),
        )

    async def ControlledShutdown(  # noqa: N802
        self, request: controller_pb2.ControlledShutdownRequest, context: Context
    ) -> controller_pb2.ControlledShutdownResponse:
        async def work() -> controller_pb2.ControlledShutdownResponse:
            remaining = await self.controller.controlled_shutdown(request.broker_id, request.broker_incarnation)
            return controller_pb2.ControlledShutdownResponse(
                remaining=[controller_pb2.TopicPartitionRef(topic=topic, partition=p) for topic, p in remaining]
            )

        return await self._whole(
            "ControlledShutdown",
            controller_pb2.ControlledShutdownResponse(),
            work,
            self._cluster_refusal(context, Role.BROKER),
        )

    async def DescribeCluster(  # noqa: N802
        self, request: controller_pb2.DescribeClusterRequest, context: Context
    ) -> controller_pb2.DescribeClusterResponse:
        controller = self.controller
        if not controller.active.is_set():
            return controller_pb2.DescribeClusterResponse(
                error_code=int(ErrorCode.NOT_CONTROLLER), controller_endpoint=await controller.active_endpoint()
            )
        return controller_pb2.DescribeClusterResponse(
            controller_id=controller.config.controller_id,
            controller_epoch=controller.epoch,
            controller_endpoint=controller.config.endpoint,
            brokers=controller.state.broker_protos(),
            controllers=await controller.controllers(),
            authorizer_enabled=self.access.enabled,
        )


def _result(name: str, error: TidelogError) -> controller_pb2.TopicResult:
    return controller_pb2.TopicResult(name=name, error_code=int(error.code), error_message=error.message)
