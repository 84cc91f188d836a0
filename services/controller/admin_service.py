"""The controller's gRPC admin API (proto/tidelog/v1/controller.proto).

Only the active controller acts; any other instance answers NOT_CONTROLLER with the active one's
endpoint. Per-topic problems come back per topic, with Kafka's error codes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final, Protocol, TypeAlias, TypeVar

import grpc
from etcd3aio import Etcd3Client, prefix_range_end
from etcd3aio.kv import KVService

from tidelog.common.errors import ErrorCode, InvalidRequestError, NotControllerError, TidelogError
from tidelog.common.security.authentication.scram import MECHANISM, ScramCredential
from tidelog.common.security.authorization.acl import CLUSTER_NAME, Operation, ResourceType
from tidelog.common.security.authorization.acl_proto import acl_filter_from_proto, acl_from_proto, acl_to_proto
from tidelog.common.security.quotas.quota import QuotaEntity, check_values
from tidelog.common.security.quotas.quota_proto import quota_entity_from_parts, quota_entity_to_parts
from tidelog.common.settings import SecuritySettings
from tidelog.controller.controller import Controller
from tidelog.server_common import metrics_catalog
from tidelog.server_common.metadata import QUOTAS_PREFIX, SCRAM_CREDENTIALS_PREFIX, scram_credential_key
from tidelog.server_common.security.authorization.access_control import AccessControl, Role
from tidelog.server_common.security.authorization.acl_store import add_acls, list_acls, remove_acls
from tidelog.v1 import controller_pb2, controller_pb2_grpc

__all__ = ["AdminService"]

Request = TypeVar("Request")
Response = TypeVar("Response")


class _AnsweredWhole(Protocol):
    """A response that carries one error for the whole request (and where the active controller is)."""

    error_code: int
    controller_endpoint: str


Whole = TypeVar("Whole", bound=_AnsweredWhole)


class _Refusable(Protocol):
    """A response with one error code and message for the whole request."""

    error_code: int
    error_message: str


Refusable = TypeVar("Refusable", bound=_Refusable)

ADMIN_REQUESTS = metrics_catalog.counter("tidelog_controller_admin_requests_total")
Context: TypeAlias = "grpc.aio.ServicerContext[Any, Any]"
USER_NAME: Final = re.compile(r"[A-Za-z0-9._@-]{1,255}")
SALTED_PASSWORD_BYTES: Final = 64


class AdminService(controller_pb2_grpc.ControllerServicer):
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

    def _cluster_refusal(self, context: Context, operation: Operation | Role) -> str:
        """Why the caller may not do `operation` on the Cluster (or is not of the service role); ""
        when it may."""
        if not self.access.enabled:
            return ""
        caller = self.access.caller(context)
        if isinstance(operation, Role):
            if self.access.has_role(caller, operation):
                return ""
            return f"{caller} is not one of {operation.value}"
        if self.access.allowed(caller, operation, ResourceType.CLUSTER, CLUSTER_NAME):
            return ""
        return f"{caller} may not {operation.value} the Cluster"

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

    # ---- ACLs: any controller answers (they live in etcd) ------------------------------------

    async def _security_call(
        self,
        method: str,
        context: Context,
        operation: Operation,
        response: Refusable,
        work: Callable[[], Awaitable[None]],
    ) -> Refusable:
        if refusal := self._cluster_refusal(context, operation):
            ADMIN_REQUESTS.labels(method, "unauthorised").inc()
            response.error_code, response.error_message = int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED), refusal
            return response
        try:
            await work()
        except TidelogError as error:
            ADMIN_REQUESTS.labels(method, "error").inc()
            response.error_code, response.error_message = int(error.code), error.message
            return response
        ADMIN_REQUESTS.labels(method, "ok").inc()
        return response

    async def CreateAcls(  # noqa: N802
        self, request: controller_pb2.CreateAclsRequest, context: Context
    ) -> controller_pb2.CreateAclsResponse:
        async def work() -> None:
            bindings = [acl_from_proto(binding) for binding in request.creations]  # all checked before any is written
            await add_acls(self.controller.etcd, bindings)

        return await self._security_call(
            "CreateAcls", context, Operation.ALTER, controller_pb2.CreateAclsResponse(), work
        )

    async def DeleteAcls(  # noqa: N802
        self, request: controller_pb2.DeleteAclsRequest, context: Context
    ) -> controller_pb2.DeleteAclsResponse:
        response = controller_pb2.DeleteAclsResponse()

        async def work() -> None:
            filters = [acl_filter_from_proto(selected) for selected in request.filters]
            for selected in filters:
                response.deleted.extend(
                    acl_to_proto(binding) for binding in await remove_acls(self.controller.etcd, selected)
                )

        return await self._security_call("DeleteAcls", context, Operation.ALTER, response, work)

    async def DescribeAcls(  # noqa: N802
        self, request: controller_pb2.DescribeAclsRequest, context: Context
    ) -> controller_pb2.DescribeAclsResponse:
        response = controller_pb2.DescribeAclsResponse()

        async def work() -> None:
            selected = acl_filter_from_proto(request.filter)
            response.bindings.extend(
                acl_to_proto(binding) for binding in await list_acls(self.controller.etcd, selected)
            )

        return await self._security_call("DescribeAcls", context, Operation.DESCRIBE, response, work)

    # ---- SCRAM credentials (KIP-554): kept in etcd ------------------------------------------

    async def AlterUserScramCredentials(  # noqa: N802
        self, request: controller_pb2.AlterUserScramCredentialsRequest, context: Context
    ) -> controller_pb2.AlterUserScramCredentialsResponse:
        response = controller_pb2.AlterUserScramCredentialsResponse()
        etcd = self.controller.etcd

        async def work() -> None:
            assert etcd.kv is not None
            for deletion in request.deletions:
                result = response.results.add(user=deletion.name)
                if not deletion.name or deletion.mechanism != MECHANISM:
                    result.error_code = int(ErrorCode.INVALID_REQUEST)
                    result.error_message = f"a user name and mechanism {MECHANISM} are needed"
                    continue
                deleted = await etcd.kv.delete(scram_credential_key(deletion.name))
                if not int(deleted.deleted):
                    result.error_code = int(ErrorCode.RESOURCE_NOT_FOUND)
                    result.error_message = f"user {deletion.name!r} has no {MECHANISM} credential"
            for upsertion in request.upsertions:
                result = response.results.add(user=upsertion.name)
                try:
                    credential = _credential_of(upsertion)
                except (ValueError, InvalidRequestError) as error:
                    result.error_code, result.error_message = int(ErrorCode.INVALID_REQUEST), str(error)
                    continue
                await etcd.kv.put(scram_credential_key(upsertion.name), credential.to_json())

        return await self._security_call("AlterUserScramCredentials", context, Operation.ALTER, response, work)

    async def DescribeUserScramCredentials(  # noqa: N802
        self, request: controller_pb2.DescribeUserScramCredentialsRequest, context: Context
    ) -> controller_pb2.DescribeUserScramCredentialsResponse:
        response = controller_pb2.DescribeUserScramCredentialsResponse()
        etcd = self.controller.etcd

        async def work() -> None:
            assert etcd.kv is not None
            prefix = SCRAM_CREDENTIALS_PREFIX.encode()
            found = await etcd.kv.get(prefix, prefix_range_end(prefix))
            wanted = set(request.users)
            for kv in found.kvs:
                user = bytes(kv.key)[len(prefix) :].decode()
                if wanted and user not in wanted:
                    continue
                credential = ScramCredential.from_json(bytes(kv.value))  # salts and keys stay here
                response.users.add(user=user, mechanism=credential.mechanism, iterations=credential.iterations)

        return await self._security_call("DescribeUserScramCredentials", context, Operation.DESCRIBE, response, work)

    # ---- client quotas (KIP-546): kept in etcd ----------------------------------------------

    async def AlterClientQuotas(  # noqa: N802
        self, request: controller_pb2.AlterClientQuotasRequest, context: Context
    ) -> controller_pb2.AlterClientQuotasResponse:
        etcd = self.controller.etcd

        async def work() -> None:
            changes = [
                (quota_entity_from_parts(entry.entity), entry.ops) for entry in request.entries
            ]  # all checked first
            for _, ops in changes:
                check_values({op.key: op.value for op in ops if not op.remove})
                check_values({op.key: 1.0 for op in ops if op.remove})  # known names only
            for entity, ops in changes:
                await _alter_quota(etcd, entity, ops)

        return await self._security_call(
            "AlterClientQuotas", context, Operation.ALTER_CONFIGS, controller_pb2.AlterClientQuotasResponse(), work
        )

    async def DescribeClientQuotas(  # noqa: N802
        self, request: controller_pb2.DescribeClientQuotasRequest, context: Context
    ) -> controller_pb2.DescribeClientQuotasResponse:
        response = controller_pb2.DescribeClientQuotasResponse()
        etcd = self.controller.etcd

        async def work() -> None:
            assert etcd.kv is not None
            prefix = QUOTAS_PREFIX.encode()
            for kv in (await etcd.kv.get(prefix, prefix_range_end(prefix))).kvs:
                entity = QuotaEntity.from_key(bytes(kv.key)[len(prefix) :].decode())
                response.entries.add(entity=quota_entity_to_parts(entity), values=json.loads(bytes(kv.value)))

        return await self._security_call("DescribeClientQuotas", context, Operation.DESCRIBE_CONFIGS, response, work)


async def _alter_quota(etcd: Etcd3Client, entity: QuotaEntity, ops: Sequence[controller_pb2.QuotaValue]) -> None:
    """Read, change, write back only if nobody changed it meanwhile (else again)."""
    assert etcd.kv is not None
    key = QUOTAS_PREFIX + entity.key
    while True:
        found = await etcd.kv.get(key)
        version = int(found.kvs[0].version) if found.kvs else 0
        values: dict[str, float] = json.loads(bytes(found.kvs[0].value)) if found.kvs else {}
        for op in ops:
            if op.remove:
                values.pop(op.key, None)
            else:
                values[op.key] = op.value
        write = (
            KVService.txn_op_put(key, json.dumps(values, sort_keys=True).encode())
            if values
            else KVService.txn_op_delete(key)
        )
        response = await etcd.kv.txn(compare=[KVService.txn_compare_version(key, version)], success=[write])
        if response.succeeded:
            return


def _credential_of(upsertion: controller_pb2.ScramCredentialUpsertion) -> ScramCredential:
    if not USER_NAME.fullmatch(upsertion.name):
        raise InvalidRequestError(f"user name {upsertion.name!r}: 1 to 255 of letters, digits and . _ - @")
    if upsertion.mechanism != MECHANISM:
        raise InvalidRequestError(f"mechanism {upsertion.mechanism!r} is not offered; use {MECHANISM}")
    if len(upsertion.salted_password) != SALTED_PASSWORD_BYTES:
        raise InvalidRequestError(f"salted_password must be {SALTED_PASSWORD_BYTES} bytes (SHA-512)")
    return ScramCredential.from_salted_password(upsertion.salted_password, upsertion.salt, upsertion.iterations)


def _result(name: str, error: TidelogError) -> controller_pb2.TopicResult:
    return controller_pb2.TopicResult(name=name, error_code=int(error.code), error_message=error.message)
