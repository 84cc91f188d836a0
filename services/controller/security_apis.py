"""The Controller service's security calls: ACLs, SCRAM credentials (KIP-554) and client quotas
(KIP-546). They live in etcd, so any controller answers, not only the active one; each is
authorized on the Cluster (Kafka's Alter / Describe) before it runs.

A base of AdminService (admin_service.py): one gRPC servicer serves the whole Controller service.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final, Protocol, TypeAlias, TypeVar

import grpc
from etcd3aio import Etcd3Client, prefix_range_end
from etcd3aio.kv import KVService

from tidelog.common.errors import ErrorCode, InvalidRequestError, TidelogError
from tidelog.common.security.authentication.scram import MECHANISM, ScramCredential
from tidelog.common.security.authorization.acl import CLUSTER_NAME, Operation, ResourceType
from tidelog.common.security.authorization.acl_proto import acl_filter_from_proto, acl_from_proto, acl_to_proto
from tidelog.common.security.quotas.quota import QuotaEntity, check_values
from tidelog.common.security.quotas.quota_proto import quota_entity_from_parts, quota_entity_to_parts
from tidelog.controller.controller import Controller
from tidelog.server_common import metrics_catalog
from tidelog.server_common.metadata import QUOTAS_PREFIX, SCRAM_CREDENTIALS_PREFIX, scram_credential_key
from tidelog.server_common.security.authorization.access_control import AccessControl, Role
from tidelog.server_common.security.authorization.acl_store import add_acls, list_acls, remove_acls
from tidelog.v1 import controller_pb2

__all__ = ["ADMIN_REQUESTS", "Context", "SecurityApis"]

ADMIN_REQUESTS = metrics_catalog.counter("tidelog_controller_admin_requests_total")
Context: TypeAlias = "grpc.aio.ServicerContext[Any, Any]"
USER_NAME: Final = re.compile(r"[A-Za-z0-9._@-]{1,255}")
SALTED_PASSWORD_BYTES: Final = 64


class _Refusable(Protocol):
    """A response with one error code and message for the whole request."""

    error_code: int
    error_message: str


Refusable = TypeVar("Refusable", bound=_Refusable)


class SecurityApis:
    controller: Controller
    access: AccessControl

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
