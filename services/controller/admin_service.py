"""The controller's gRPC admin API (proto/tidelog/v1/controller.proto).

Only the active controller acts; any other instance answers NOT_CONTROLLER with the active one's
endpoint. Per-topic problems come back per topic, with Kafka's error codes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol, TypeVar

import grpc

from tidelog.common import metrics_catalog
from tidelog.common.errors import ErrorCode, NotControllerError, TidelogError
from tidelog.controller.controller import Controller
from tidelog.v1 import controller_pb2, controller_pb2_grpc

__all__ = ["AdminService"]

Request = TypeVar("Request")
Response = TypeVar("Response")


class _AnsweredWhole(Protocol):
    """A response that carries one error for the whole request (and where the active controller is)."""

    error_code: int
    controller_endpoint: str


Whole = TypeVar("Whole", bound=_AnsweredWhole)

ADMIN_REQUESTS = metrics_catalog.counter("tidelog_controller_admin_requests_total")


class AdminService(controller_pb2_grpc.ControllerServicer):
    def __init__(self, controller: Controller) -> None:
        self.controller = controller

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
        self, request: controller_pb2.CreateTopicsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> controller_pb2.CreateTopicsResponse:
        return await self._topics(
            "CreateTopics",
            self.controller.create_topics,
            request,
            controller_pb2.CreateTopicsResponse,
            [topic.name for topic in request.topics],
        )

    async def DeleteTopics(  # noqa: N802
        self, request: controller_pb2.DeleteTopicsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> controller_pb2.DeleteTopicsResponse:
        return await self._topics(
            "DeleteTopics",
            self.controller.delete_topics,
            request,
            controller_pb2.DeleteTopicsResponse,
            list(request.names),
        )

    async def CreatePartitions(  # noqa: N802
        self, request: controller_pb2.CreatePartitionsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> controller_pb2.CreatePartitionsResponse:
        return await self._topics(
            "CreatePartitions",
            self.controller.create_partitions,
            request,
            controller_pb2.CreatePartitionsResponse,
            [change.topic for change in request.topics],
        )

    async def AlterConfigs(  # noqa: N802
        self, request: controller_pb2.AlterConfigsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> controller_pb2.AlterConfigsResponse:
        return await self._topics(
            "AlterConfigs",
            self.controller.alter_configs,
            request,
            controller_pb2.AlterConfigsResponse,
            [change.topic for change in request.changes],
        )

    async def AlterPartition(  # noqa: N802
        self, request: controller_pb2.AlterPartitionRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> controller_pb2.AlterPartitionResponse:
        try:
            response = await self.controller.alter_partition(request)
            ADMIN_REQUESTS.labels("AlterPartition", "error" if response.error_code else "ok").inc()
            return response
        except NotControllerError as error:
            ADMIN_REQUESTS.labels("AlterPartition", "not_controller").inc()
            return controller_pb2.AlterPartitionResponse(
                error_code=int(error.code),
                error_message=error.message,
                controller_endpoint=await self.controller.active_endpoint(),
            )

    async def _whole(self, method: str, response: Whole, work: Callable[[], Awaitable[Whole]]) -> Whole:
        """Requests answered as a whole: NOT_CONTROLLER (with the active endpoint) or the result."""
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
        self, request: controller_pb2.ElectLeadersRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> controller_pb2.ElectLeadersResponse:
        async def work() -> controller_pb2.ElectLeadersResponse:
            return controller_pb2.ElectLeadersResponse(partitions=await self.controller.elect_leaders(request))

        return await self._whole("ElectLeaders", controller_pb2.ElectLeadersResponse(), work)

    async def AlterPartitionReassignments(  # noqa: N802
        self, request: controller_pb2.AlterPartitionReassignmentsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> controller_pb2.AlterPartitionReassignmentsResponse:
        async def work() -> controller_pb2.AlterPartitionReassignmentsResponse:
            results = await self.controller.alter_reassignments(request)
            return controller_pb2.AlterPartitionReassignmentsResponse(partitions=results)

        return await self._whole(
            "AlterPartitionReassignments", controller_pb2.AlterPartitionReassignmentsResponse(), work
        )

    async def ListPartitionReassignments(  # noqa: N802
        self, request: controller_pb2.ListPartitionReassignmentsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> controller_pb2.ListPartitionReassignmentsResponse:
        async def work() -> controller_pb2.ListPartitionReassignmentsResponse:
            return controller_pb2.ListPartitionReassignmentsResponse(
                reassignments=self.controller.ongoing_reassignments()
            )

        return await self._whole(
            "ListPartitionReassignments", controller_pb2.ListPartitionReassignmentsResponse(), work
        )

    async def ControlledShutdown(  # noqa: N802
        self, request: controller_pb2.ControlledShutdownRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> controller_pb2.ControlledShutdownResponse:
        async def work() -> controller_pb2.ControlledShutdownResponse:
            remaining = await self.controller.controlled_shutdown(request.broker_id, request.broker_incarnation)
            return controller_pb2.ControlledShutdownResponse(
                remaining=[controller_pb2.TopicPartitionRef(topic=topic, partition=p) for topic, p in remaining]
            )

        return await self._whole("ControlledShutdown", controller_pb2.ControlledShutdownResponse(), work)

    async def DescribeCluster(  # noqa: N802
        self, request: controller_pb2.DescribeClusterRequest, context: grpc.aio.ServicerContext[Any, Any]
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
        )


def _result(name: str, error: TidelogError) -> controller_pb2.TopicResult:
    return controller_pb2.TopicResult(name=name, error_code=int(error.code), error_message=error.message)
