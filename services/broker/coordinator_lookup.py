"""FindCoordinator as any broker answers it (Kafka's KafkaApis.handleFindCoordinatorRequest): the
group's `__consumer_offsets` partition, or the transactional.id's `__transaction_state` one, and
the coordinator instance whose claim in etcd holds it (coordinator/partition_ownership.py)."""

from __future__ import annotations

from etcd3aio import Etcd3Client

from tidelog.broker.metadata_cache import MetadataCache
from tidelog.common.errors import ErrorCode
from tidelog.common.security.authorization.acl import Operation, ResourceType
from tidelog.server_common.metadata import (
    CONSUMER_OFFSETS_TOPIC,
    COORDINATOR_PARTITIONS_PREFIX,
    TRANSACTION_STATE_TOPIC,
    TXN_COORDINATOR_PARTITIONS_PREFIX,
    CoordinatorClaimRecord,
    coordinator_claim_key,
    offsets_partition_for,
)
from tidelog.server_common.security.authorization.access_control import AccessControl, Caller
from tidelog.v1 import coordinator_pb2

__all__ = ["find_coordinator"]


async def find_coordinator(
    request: coordinator_pb2.FindCoordinatorRequest,
    caller: Caller,
    access: AccessControl,
    metadata: MetadataCache,
    etcd: Etcd3Client | None,
) -> coordinator_pb2.FindCoordinatorResponse:
    if request.transactional_id:
        key, resource, refused = (
            request.transactional_id,
            ResourceType.TRANSACTIONAL_ID,
            ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        )
        topic, claims_prefix = TRANSACTION_STATE_TOPIC, TXN_COORDINATOR_PARTITIONS_PREFIX
    else:
        key, resource, refused = request.group_id, ResourceType.GROUP, ErrorCode.GROUP_AUTHORIZATION_FAILED
        topic, claims_prefix = CONSUMER_OFFSETS_TOPIC, COORDINATOR_PARTITIONS_PREFIX
    if not access.allowed(caller, Operation.DESCRIBE, resource, key):
        return coordinator_pb2.FindCoordinatorResponse(
            error_code=int(refused), error_message=f"{caller} may not Describe {resource.value} {key!r}"
        )
    partitions = metadata.topics.get(topic, [])
    if not partitions or etcd is None or etcd.kv is None:
        return coordinator_pb2.FindCoordinatorResponse(
            error_code=int(ErrorCode.COORDINATOR_NOT_AVAILABLE),
            error_message=f"{topic} does not exist yet: is a coordinator running?",
        )
    partition = offsets_partition_for(key, len(partitions))
    found = await etcd.kv.get(coordinator_claim_key(partition, claims_prefix))
    if not found.kvs:
        return coordinator_pb2.FindCoordinatorResponse(
            error_code=int(ErrorCode.COORDINATOR_NOT_AVAILABLE),
            error_message=f"no coordinator serves {topic}-{partition} yet",
            partition=partition,
        )
    claim = CoordinatorClaimRecord.from_json(found.kvs[0].value)
    return coordinator_pb2.FindCoordinatorResponse(endpoint=claim.endpoint, partition=partition)
