"""Consumer-group requests on the Kafka listener, forwarded to the group's coordinator over gRPC.

Tidelog's group coordinators are their own processes (services/coordinator) and speak only gRPC,
so FindCoordinator names the broker asked (after checking that some coordinator serves the
group's `__consumer_offsets` partition), and that broker forwards each group request to the
coordinator instance holding the group, found as any broker finds it (coordinator_lookup). Clients
see one Kafka cluster. A coordinator that moved answers NOT_COORDINATOR; the client asks
FindCoordinator again and this broker looks the owner up afresh.

Group membership bytes (the subscription and assignment) pass through untouched, as Kafka's
coordinator treats them: Kafka clients of different libraries share a group, as on Kafka.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from tidelog.broker.broker_service import BrokerService
from tidelog.broker.kafka_api.api_table import ApiKey
from tidelog.broker.kafka_api.coordinator_forwarding import (
    CoordinatorUnavailableError,
    committed_partitions,
    coordinator_stub,
    forward,
    offsets_to_commit,
)
from tidelog.broker.kafka_api.request_context import KafkaRequestContext
from tidelog.common.channels import ChannelPool
from tidelog.common.errors import ErrorCode
from tidelog.v1 import coordinator_pb2

__all__ = ["HANDLED", "GroupApis"]

Message = dict[str, Any]
GROUP_KEY: Final = 0  # FindCoordinator's KeyType: a consumer group
TRANSACTION_KEY: Final = 1  # a transactional id
REQUEST_TIMEOUT_S: Final = 30.0  # a forwarded group request's bound, but JoinGroup's
JOIN_MARGIN_S: Final = 5.0  # JoinGroup waits up to the rebalance timeout, and this more
NO_GENERATION: Final = -1


class GroupApis:
    def __init__(
        self, service: BrokerService, channels: ChannelPool, advertised: Callable[[], tuple[str, int]]
    ) -> None:
        self.service = service
        self.channels = channels
        self.advertised = advertised  # where this broker's Kafka listener is (known once bound)

    async def _call(
        self,
        group_id: str,
        context: KafkaRequestContext,
        method: str,
        request: Any,
        timeout_s: float = REQUEST_TIMEOUT_S,
    ) -> Any:
        """The group coordinator's answer; CoordinatorUnavailableError without one."""
        lookup = coordinator_pb2.FindCoordinatorRequest(group_id=group_id)
        return await forward(self.service, self.channels, lookup, context, method, request, timeout_s)

    async def find_coordinator(self, request: Message, version: int, context: KafkaRequestContext) -> Message:
        host, port = self.advertised()
        if request["KeyType"] not in (GROUP_KEY, TRANSACTION_KEY):
            code, message = ErrorCode.INVALID_REQUEST, f"no coordinator of key type {request['KeyType']}"
        else:
            try:  # (a transactional id's requests are forwarded by txn_apis)
                key = request["Key"]
                lookup = (
                    coordinator_pb2.FindCoordinatorRequest(transactional_id=key)
                    if request["KeyType"] == TRANSACTION_KEY
                    else coordinator_pb2.FindCoordinatorRequest(group_id=key)
                )
                await coordinator_stub(self.service, self.channels, lookup, context)
                code, message = ErrorCode.NONE, ""
            except CoordinatorUnavailableError as error:
                code, message = ErrorCode(error.code), str(error)
        node = -1 if code else self.service.replicas.broker_id
        return {
            "ThrottleTimeMs": 0,
            "ErrorCode": int(code),
            "ErrorMessage": message or None,
            "NodeId": node,
            "Host": host if node >= 0 else "",
            "Port": port if node >= 0 else -1,
        }

    async def join_group(self, request: Message, version: int, context: KafkaRequestContext) -> Message:
        rebalance_ms = request["RebalanceTimeoutMs"] if version >= 1 else request["SessionTimeoutMs"]
        try:
            answer = await self._call(
                request["GroupId"],
                context,
                "JoinGroup",
                coordinator_pb2.JoinGroupRequest(
                    group_id=request["GroupId"],
                    session_timeout_ms=request["SessionTimeoutMs"],
                    rebalance_timeout_ms=rebalance_ms,
                    member_id=request["MemberId"],
                    group_instance_id=request["GroupInstanceId"] or "",
                    protocol_type=request["ProtocolType"],
                    protocols=[
                        coordinator_pb2.Protocol(name=protocol["Name"], metadata=protocol["Metadata"])
                        for protocol in request["Protocols"]
                    ],
                    client_id=context.client_id,
                    require_known_member_id=version >= 4,  # KIP-394, as Kafka's broker from v4
                ),
                timeout_s=max(rebalance_ms, 0) / 1000 + JOIN_MARGIN_S,
            )
        except CoordinatorUnavailableError as error:
            return {
                "ErrorCode": error.code,
                "GenerationId": -1,
                "ProtocolName": None,
                "Leader": "",
                "MemberId": request["MemberId"],
                "Members": [],
            }
        return {
            "ThrottleTimeMs": 0,
            "ErrorCode": answer.error_code,
            "GenerationId": answer.generation_id,
            "ProtocolType": request["ProtocolType"],
            "ProtocolName": answer.protocol_name or (None if version >= 7 else ""),
            "Leader": answer.leader,
            "SkipAssignment": False,
            "MemberId": answer.member_id,
            "Members": [
                {
                    "MemberId": member.member_id,
                    "GroupInstanceId": member.group_instance_id or None,
                    "Metadata": member.metadata,
                }
                for member in answer.members
            ],
        }

    async def sync_group(self, request: Message, version: int, context: KafkaRequestContext) -> Message:
        try:
            answer = await self._call(
                request["GroupId"],
                context,
                "SyncGroup",
                coordinator_pb2.SyncGroupRequest(
                    group_id=request["GroupId"],
                    generation_id=request["GenerationId"],
                    member_id=request["MemberId"],
                    group_instance_id=request["GroupInstanceId"] or "",
                    assignments=[
                        coordinator_pb2.Assignment(member_id=item["MemberId"], assignment=item["Assignment"])
                        for item in request["Assignments"]
                    ],
                ),
            )
            code, assignment = answer.error_code, answer.assignment
        except CoordinatorUnavailableError as error:
            code, assignment = error.code, b""
        return {
            "ThrottleTimeMs": 0,
            "ErrorCode": code,
            "ProtocolType": request["ProtocolType"],
            "ProtocolName": request["ProtocolName"],
            "Assignment": assignment,
        }

    async def heartbeat(self, request: Message, version: int, context: KafkaRequestContext) -> Message:
        try:
            answer = await self._call(
                request["GroupId"],
                context,
                "Heartbeat",
                coordinator_pb2.HeartbeatRequest(
                    group_id=request["GroupId"],
                    generation_id=request["GenerationId"],
                    member_id=request["MemberId"],
                    group_instance_id=request["GroupInstanceId"] or "",
                ),
            )
            code = answer.error_code
        except CoordinatorUnavailableError as error:
            code = error.code
        return {"ThrottleTimeMs": 0, "ErrorCode": code}

    async def leave_group(self, request: Message, version: int, context: KafkaRequestContext) -> Message:
        leaving = [{"MemberId": request["MemberId"], "GroupInstanceId": None}] if version < 3 else request["Members"]
        results = []
        for member in leaving:
            try:
                answer = await self._call(
                    request["GroupId"],
                    context,
                    "LeaveGroup",
                    coordinator_pb2.LeaveGroupRequest(
                        group_id=request["GroupId"],
                        member_id=member["MemberId"],
                        group_instance_id=member["GroupInstanceId"] or "",
                    ),
                )
                code = answer.error_code
            except CoordinatorUnavailableError as error:
                code = error.code
            results.append(
                {"MemberId": member["MemberId"], "GroupInstanceId": member["GroupInstanceId"], "ErrorCode": code}
            )
        top = next((result["ErrorCode"] for result in results if result["ErrorCode"]), 0) if version < 3 else 0
        return {"ThrottleTimeMs": 0, "ErrorCode": top, "Members": results}

    async def offset_commit(self, request: Message, version: int, context: KafkaRequestContext) -> Message:
        topics = request["Topics"]
        try:
            answer = await self._call(
                request["GroupId"],
                context,
                "OffsetCommit",
                coordinator_pb2.OffsetCommitRequest(
                    group_id=request["GroupId"],
                    generation_id=request["GenerationIdOrMemberEpoch"] if version >= 1 else NO_GENERATION,
                    member_id=request["MemberId"],
                    group_instance_id=request["GroupInstanceId"] or "",
                    partitions=offsets_to_commit(topics),
                ),
            )
            codes = {
                (result.topic, result.partition): result.error_code or answer.error_code for result in answer.partitions
            }
            default = answer.error_code
        except CoordinatorUnavailableError as error:
            codes, default = {}, error.code
        return {"ThrottleTimeMs": 0, "Topics": committed_partitions(topics, codes, default)}

    async def offset_fetch(self, request: Message, version: int, context: KafkaRequestContext) -> Message:
        asked = request["Topics"]
        try:
            answer = await self._call(
                request["GroupId"],
                context,
                "OffsetFetch",
                coordinator_pb2.OffsetFetchRequest(
                    group_id=request["GroupId"],
                    partitions=[
                        coordinator_pb2.OffsetCommitPartition(topic=topic["Name"], partition=index)
                        for topic in asked or ()
                        for index in topic["PartitionIndexes"]
                    ],
                    require_stable=request["RequireStable"],
                ),
            )
            code, found = answer.error_code, list(answer.partitions)
        except CoordinatorUnavailableError as error:
            code, found = error.code, []
        by_topic: dict[str, list[Message]] = {}
        for result in found:
            by_topic.setdefault(result.topic, []).append(
                {
                    "PartitionIndex": result.partition,
                    "CommittedOffset": result.offset,
                    "CommittedLeaderEpoch": -1,
                    "Metadata": result.metadata,
                    "ErrorCode": result.error_code,
                }
            )
        return {
            "ThrottleTimeMs": 0,
            "Topics": [{"Name": name, "Partitions": partitions} for name, partitions in by_topic.items()],
            "ErrorCode": code,
        }

    async def describe_groups(self, request: Message, version: int, context: KafkaRequestContext) -> Message:
        groups = []
        for group_id in request["Groups"]:
            try:
                answer = await self._call(
                    group_id, context, "DescribeGroups", coordinator_pb2.DescribeGroupsRequest(group_ids=[group_id])
                )
                described = answer.groups[0]
            except (CoordinatorUnavailableError, IndexError) as error:
                code = (
                    error.code
                    if isinstance(error, CoordinatorUnavailableError)
                    else int(ErrorCode.COORDINATOR_NOT_AVAILABLE)
                )
                groups.append(
                    {
                        "ErrorCode": code,
                        "GroupId": group_id,
                        "GroupState": "",
                        "ProtocolType": "",
                        "ProtocolData": "",
                        "Members": [],
                    }
                )
                continue
            groups.append(
                {
                    "ErrorCode": described.error_code,
                    "GroupId": described.group_id,
                    "GroupState": described.state,
                    "ProtocolType": described.protocol_type,
                    "ProtocolData": described.protocol_name,
                    "Members": [
                        {
                            "MemberId": member.member_id,
                            "GroupInstanceId": member.group_instance_id or None,
                            "ClientId": member.client_id,
                            "ClientHost": "",
                            "MemberMetadata": b"",
                            "MemberAssignment": member.assignment,
                        }
                        for member in described.members
                    ],
                    "AuthorizedOperations": -(2**31),
                }
            )
        return {"ThrottleTimeMs": 0, "Groups": groups}

    async def list_groups(self, request: Message, version: int, context: KafkaRequestContext) -> Message:
        try:
            answer = await self._call("", context, "ListGroups", coordinator_pb2.ListGroupsRequest())
        except CoordinatorUnavailableError as error:
            return {"ThrottleTimeMs": 0, "ErrorCode": error.code, "Groups": []}
        wanted = set(request["StatesFilter"]) if version >= 4 else set()
        return {
            "ThrottleTimeMs": 0,
            "ErrorCode": answer.error_code,
            "Groups": [
                {"GroupId": group.group_id, "ProtocolType": group.protocol_type, "GroupState": group.state}
                for group in answer.groups
                if not wanted or group.state in wanted
            ],
        }

    async def delete_groups(self, request: Message, version: int, context: KafkaRequestContext) -> Message:
        results = []
        for group_id in request["GroupsNames"]:
            try:
                answer = await self._call(
                    group_id, context, "DeleteGroups", coordinator_pb2.DeleteGroupsRequest(group_ids=[group_id])
                )
                code = answer.groups[0].error_code if answer.groups else int(ErrorCode.COORDINATOR_NOT_AVAILABLE)
            except CoordinatorUnavailableError as error:
                code = error.code
            results.append({"GroupId": group_id, "ErrorCode": code})
        return {"ThrottleTimeMs": 0, "Results": results}


HANDLED: Final = {
    ApiKey.FIND_COORDINATOR: "find_coordinator",
    ApiKey.JOIN_GROUP: "join_group",
    ApiKey.SYNC_GROUP: "sync_group",
    ApiKey.HEARTBEAT: "heartbeat",
    ApiKey.LEAVE_GROUP: "leave_group",
    ApiKey.OFFSET_COMMIT: "offset_commit",
    ApiKey.OFFSET_FETCH: "offset_fetch",
    ApiKey.DESCRIBE_GROUPS: "describe_groups",
    ApiKey.LIST_GROUPS: "list_groups",
    ApiKey.DELETE_GROUPS: "delete_groups",
}
