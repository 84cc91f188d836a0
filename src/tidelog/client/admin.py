"""Admin client: topics, configs, partitions and the cluster, through the active controller.

The controller's endpoint comes from broker metadata (or is given); an instance that is not active
answers NOT_CONTROLLER with the active one's endpoint, and the client follows it, retrying with
backoff until `request_timeout_ms` runs out (a controller election is in progress).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final

import grpc

from tidelog.client.cluster_metadata import ClusterMetadata
from tidelog.client.connections import Connections
from tidelog.common.errors import ErrorCode, RequestTimedOutError, TidelogError, error_for
from tidelog.common.security.authentication.scram import ITERATIONS_DEFAULT, MECHANISM, salted_password
from tidelog.common.security.authorization.acl import AclBinding, AclFilter
from tidelog.common.security.authorization.acl_proto import acl_filter_to_proto, acl_from_proto, acl_to_proto
from tidelog.common.security.quotas.quota import QuotaEntity
from tidelog.common.security.quotas.quota_proto import quota_entity_from_parts, quota_entity_to_parts
from tidelog.common.settings import SecuritySettings
from tidelog.v1 import common_pb2, controller_pb2

__all__ = ["AdminClient", "NewTopic", "TopicDescription"]

RETRY_BACKOFF_S: Final = 0.1


@dataclasses.dataclass(frozen=True, slots=True)
class NewTopic:
    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    configs: Mapping[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True, slots=True)
class TopicDescription:
    name: str
    partitions: list[common_pb2.PartitionState]
    configs: dict[str, str]


class AdminClient:
    def __init__(
        self,
        bootstrap: Sequence[str],
        *,
        controllers: Sequence[str] = (),
        request_timeout_ms: int = 30_000,
        connections: Connections | None = None,
        security: SecuritySettings | Mapping[str, object] | None = None,
    ) -> None:
        self.connections = connections or Connections(security)
        self._owns_connections = connections is None
        self.metadata = ClusterMetadata(bootstrap, self.connections, request_timeout_s=request_timeout_ms / 1000)
        self.controllers = list(controllers)
        self.request_timeout_s = request_timeout_ms / 1000

    async def close(self) -> None:
        if self._owns_connections:
            await self.connections.close()

    async def __aenter__(self) -> AdminClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    # ---- reaching the controller -----------------------------------------------------------

    async def _candidates(self) -> list[str]:
        endpoints = []
        try:
            await self.metadata.refresh(["__no_topic__"])
            if self.metadata.controller_endpoint:
                endpoints.append(self.metadata.controller_endpoint)
        except ConnectionError:
            pass
        return [*endpoints, *(endpoint for endpoint in self.controllers if endpoint not in endpoints)]

    async def _call(self, invoke: Callable[[str], Awaitable[Any]]) -> Any:
        """Call the active controller: follow NOT_CONTROLLER hints, retry until the timeout."""
        deadline = time.monotonic() + self.request_timeout_s
        hint = ""
        last = "no controller endpoint known"
        while time.monotonic() < deadline:
            for endpoint in [hint] if hint else await self._candidates():
                try:
                    response = await invoke(endpoint)
                except grpc.aio.AioRpcError as error:
                    last = f"{endpoint}: {error.code().name}"
                    hint = ""
                    continue
                not_controller = _not_controller(response)
                if not not_controller:
                    return response
                last = f"{endpoint}: NOT_CONTROLLER"
                hint = response.controller_endpoint
                if hint:
                    break
            if not hint:
                await asyncio.sleep(RETRY_BACKOFF_S)
        raise RequestTimedOutError(f"no active controller answered within {self.request_timeout_s} s ({last})")

    # ---- topics ----------------------------------------------------------------------------

    async def create_topics(
        self, topics: Sequence[NewTopic], *, validate_only: bool = False
    ) -> dict[str, TidelogError | None]:
        request = controller_pb2.CreateTopicsRequest(
            topics=[
                controller_pb2.NewTopic(
                    name=topic.name,
                    num_partitions=topic.num_partitions,
                    replication_factor=topic.replication_factor,
                    configs=dict(topic.configs),
                )
                for topic in topics
            ],
            validate_only=validate_only,
        )
        response = await self._call(
            lambda endpoint: self.connections.controller(endpoint).CreateTopics(request, timeout=self.request_timeout_s)
        )
        return _results(response.topics)

    async def create_topic(
        self,
        name: str,
        num_partitions: int = -1,
        replication_factor: int = -1,
        configs: Mapping[str, str] | None = None,
    ) -> None:
        """Create one topic; raises its error (TopicAlreadyExistsError, ...) if it fails."""
        result = await self.create_topics([NewTopic(name, num_partitions, replication_factor, dict(configs or {}))])
        error = result[name]
        if error is not None:
            raise error

    async def delete_topics(self, names: Sequence[str]) -> dict[str, TidelogError | None]:
        request = controller_pb2.DeleteTopicsRequest(names=list(names))
        response = await self._call(
            lambda endpoint: self.connections.controller(endpoint).DeleteTopics(request, timeout=self.request_timeout_s)
        )
        return _results(response.topics)

    async def create_partitions(self, increases: Mapping[str, int]) -> dict[str, TidelogError | None]:
        request = controller_pb2.CreatePartitionsRequest(
            topics=[
                controller_pb2.PartitionIncrease(topic=topic, total_count=count) for topic, count in increases.items()
            ]
        )
        response = await self._call(
            lambda endpoint: self.connections.controller(endpoint).CreatePartitions(
                request, timeout=self.request_timeout_s
            )
        )
        return _results(response.topics)

    async def alter_configs(
        self, topic: str, set_configs: Mapping[str, str], delete: Sequence[str] = ()
    ) -> dict[str, TidelogError | None]:
        request = controller_pb2.AlterConfigsRequest(
            changes=[controller_pb2.ConfigChange(topic=topic, set=dict(set_configs), delete=list(delete))]
        )
        response = await self._call(
            lambda endpoint: self.connections.controller(endpoint).AlterConfigs(request, timeout=self.request_timeout_s)
        )
        return _results(response.topics)

    async def list_topics(self) -> list[str]:
        await self.metadata.refresh()
        return sorted(self.metadata.partitions)

    async def describe_topics(self, names: Sequence[str] = ()) -> dict[str, TopicDescription | TidelogError]:
        response = await self.metadata.refresh(list(names))
        described: dict[str, TopicDescription | TidelogError] = {}
        for topic in response.topics:
            if topic.error_code:
                reason = (
                    "may not be described by this principal"
                    if topic.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
                    else "does not exist"
                )
                described[topic.name] = error_for(topic.error_code, f"topic {topic.name!r} {reason}")
            else:
                described[topic.name] = TopicDescription(topic.name, list(topic.partitions), dict(topic.configs))
        return described

    async def describe_cluster(self) -> controller_pb2.DescribeClusterResponse:
        request = controller_pb2.DescribeClusterRequest()
        response: controller_pb2.DescribeClusterResponse = await self._call(
            lambda endpoint: self.connections.controller(endpoint).DescribeCluster(
                request, timeout=self.request_timeout_s
            )
        )
        return response

    # ---- leaders and reassignments -----------------------------------------------------------

    async def elect_leaders(
        self, partitions: Sequence[tuple[str, int]] = (), *, unclean: bool = False
    ) -> dict[tuple[str, int], TidelogError | None]:
        """Preferred (or unclean) leader election; every partition when none are named.

        Per partition: None when a new leader was elected, else why not (ELECTION_NOT_NEEDED, ...).
        """
        request = controller_pb2.ElectLeadersRequest(
            election_type=controller_pb2.UNCLEAN if unclean else controller_pb2.PREFERRED,
            partitions=[controller_pb2.TopicPartitionRef(topic=topic, partition=p) for topic, p in partitions],
        )
        response = await self._call(
            lambda endpoint: self.connections.controller(endpoint).ElectLeaders(request, timeout=self.request_timeout_s)
        )
        _raise_whole(response)
        return _partition_results(response.partitions)

    async def alter_partition_reassignments(
        self, targets: Mapping[tuple[str, int], Sequence[int] | None]
    ) -> dict[tuple[str, int], TidelogError | None]:
        """Move partitions to the replica lists given (preferred first); None cancels a move."""
        request = controller_pb2.AlterPartitionReassignmentsRequest(
            partitions=[
                controller_pb2.ReassignablePartition(
                    topic=topic, partition=partition, replicas=list(replicas or ()), cancel=replicas is None
                )
                for (topic, partition), replicas in targets.items()
            ]
        )
        response = await self._call(
            lambda endpoint: self.connections.controller(endpoint).AlterPartitionReassignments(
                request, timeout=self.request_timeout_s
            )
        )
        _raise_whole(response)
        return _partition_results(response.partitions)

    async def list_partition_reassignments(self) -> list[controller_pb2.OngoingReassignment]:
        request = controller_pb2.ListPartitionReassignmentsRequest()
        response = await self._call(
            lambda endpoint: self.connections.controller(endpoint).ListPartitionReassignments(
                request, timeout=self.request_timeout_s
            )
        )
        _raise_whole(response)
        return list(response.reassignments)

    # ---- ACLs (kafka-acls; Kafka's AdminClient createAcls / deleteAcls / describeAcls) --------

    async def create_acls(self, bindings: Sequence[AclBinding]) -> None:
        """Add ACL bindings (adding one that exists changes nothing); InvalidRequestError names a
        bad one, and then none is added."""
        request = controller_pb2.CreateAclsRequest(creations=[acl_to_proto(binding) for binding in bindings])
        response = await self._call(
            lambda endpoint: self.connections.controller(endpoint).CreateAcls(request, timeout=self.request_timeout_s)
        )
        _raise_whole(response)

    async def delete_acls(self, filters: Sequence[AclFilter]) -> list[AclBinding]:
        """Remove the bindings each filter matches; the removed ones."""
        request = controller_pb2.DeleteAclsRequest(filters=[acl_filter_to_proto(selected) for selected in filters])
        response = await self._call(
            lambda endpoint: self.connections.controller(endpoint).DeleteAcls(request, timeout=self.request_timeout_s)
        )
        _raise_whole(response)
        return [acl_from_proto(binding) for binding in response.deleted]

    async def describe_acls(self, selected: AclFilter | None = None) -> list[AclBinding]:
        request = controller_pb2.DescribeAclsRequest(filter=acl_filter_to_proto(selected or AclFilter()))
        response = await self._call(
            lambda endpoint: self.connections.controller(endpoint).DescribeAcls(request, timeout=self.request_timeout_s)
        )
        _raise_whole(response)
        return [acl_from_proto(binding) for binding in response.bindings]

    # ---- SCRAM users (Kafka's alterUserScramCredentials / describeUserScramCredentials) -----

    async def alter_user_scram_credentials(
        self,
        upsertions: Mapping[str, str] | None = None,
        deletions: Sequence[str] = (),
        *,
        iterations: int = ITERATIONS_DEFAULT,
    ) -> dict[str, TidelogError | None]:
        """Create or change users' SCRAM-SHA-512 passwords ({user: password}) and delete users'
        credentials. The password is salted and hashed here: it never leaves this process."""
        request = controller_pb2.AlterUserScramCredentialsRequest(
            deletions=[controller_pb2.ScramCredentialDeletion(name=user, mechanism=MECHANISM) for user in deletions]
        )
        for user, password in (upsertions or {}).items():
            salt = os.urandom(32)
            salted = await asyncio.to_thread(salted_password, password, salt, iterations)
            request.upsertions.add(
                name=user, mechanism=MECHANISM, iterations=iterations, salt=salt, salted_password=salted
            )
        response = await self._call(
            lambda endpoint: self.connections.controller(endpoint).AlterUserScramCredentials(
                request, timeout=self.request_timeout_s
            )
        )
        _raise_whole(response)
        return {
            result.user: error_for(result.error_code, result.error_message) if result.error_code else None
            for result in response.results
        }

    async def describe_user_scram_credentials(self, users: Sequence[str] = ()) -> dict[str, int]:
        """Users with a SCRAM-SHA-512 credential and its iteration count (never the salt or keys)."""
        request = controller_pb2.DescribeUserScramCredentialsRequest(users=list(users))
        response = await self._call(
            lambda endpoint: self.connections.controller(endpoint).DescribeUserScramCredentials(
                request, timeout=self.request_timeout_s
            )
        )
        _raise_whole(response)
        return {user.user: user.iterations for user in response.users}

    # ---- client quotas (Kafka's alterClientQuotas / describeClientQuotas) -------------------

    async def alter_client_quotas(
        self, entity: QuotaEntity, set_values: Mapping[str, float] | None = None, remove: Sequence[str] = ()
    ) -> None:
        """Set (producer_byte_rate=..., consumer_byte_rate=..., request_percentage=...) and remove
        quotas of one entity: QuotaEntity(user="alice"), QuotaEntity(user=DEFAULT, client_id="app"), ..."""
        parts = quota_entity_to_parts(entity)
        ops = [controller_pb2.QuotaValue(key=key, value=value) for key, value in (set_values or {}).items()]
        ops += [controller_pb2.QuotaValue(key=key, remove=True) for key in remove]
        request = controller_pb2.AlterClientQuotasRequest(
            entries=[controller_pb2.QuotaAlteration(entity=parts, ops=ops)]
        )
        response = await self._call(
            lambda endpoint: self.connections.controller(endpoint).AlterClientQuotas(
                request, timeout=self.request_timeout_s
            )
        )
        _raise_whole(response)

    async def describe_client_quotas(self) -> dict[QuotaEntity, dict[str, float]]:
        request = controller_pb2.DescribeClientQuotasRequest()
        response = await self._call(
            lambda endpoint: self.connections.controller(endpoint).DescribeClientQuotas(
                request, timeout=self.request_timeout_s
            )
        )
        _raise_whole(response)
        described = {}
        for entry in response.entries:
            described[quota_entity_from_parts(entry.entity)] = dict(entry.values)
        return described


def _raise_whole(response: Any) -> None:
    if response.error_code:
        raise error_for(response.error_code, getattr(response, "error_message", "") or "request refused")


def _partition_results(results: Any) -> dict[tuple[str, int], TidelogError | None]:
    return {
        (result.topic, result.partition): error_for(result.error_code, result.error_message)
        if result.error_code
        else None
        for result in results
    }


def _not_controller(response: Any) -> bool:
    if hasattr(response, "topics") and not isinstance(response, controller_pb2.DescribeClusterResponse):
        return any(topic.error_code == ErrorCode.NOT_CONTROLLER for topic in response.topics)
    return bool(response.error_code == ErrorCode.NOT_CONTROLLER)


def _results(topics: Any) -> dict[str, TidelogError | None]:
    return {
        topic.name: error_for(topic.error_code, topic.error_message) if topic.error_code else None for topic in topics
    }
