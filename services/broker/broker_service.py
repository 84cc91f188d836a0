"""The broker's gRPC service (proto/tidelog/v1/broker.proto).

Produce and Fetch carry stored record batches untouched; Fetch long-polls up to `max_wait_ms` until `min_bytes`
are available. Per-partition problems come back per partition with Kafka's error codes; a partition this broker
does not lead answers NOT_LEADER_OR_FOLLOWER with the leader it knows and its epoch (`leader_hint`, KIP-951).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Final, TypeAlias

import grpc
import structlog
from etcd3aio import Etcd3Client

from tidelog.broker.coordinator_lookup import find_coordinator
from tidelog.broker.delayed_fetch import READ_COMMITTED, full_reads, session_reads
from tidelog.broker.epoch_waits import until_any_epoch_known
from tidelog.broker.fetch_session import SessionError
from tidelog.broker.metadata_cache import MetadataCache, newest_leader
from tidelog.broker.produce_rounds import produce_rounds, refused_produce
from tidelog.broker.producer_id_manager import ProducerIdManager
from tidelog.broker.producer_listing import describe_producers
from tidelog.broker.quota_manager import QuotaManager
from tidelog.broker.replica_manager import ReplicaManager, in_rounds
from tidelog.broker.request_metrics import REQUESTS, TOTAL_TIME_MS
from tidelog.broker.txn_markers import MARKER_TIMEOUT_S, refused_markers, write_txn_markers
from tidelog.broker.txn_verification import TxnVerifier
from tidelog.common.channels import ChannelPool
from tidelog.common.errors import ErrorCode, StaleControllerEpochError, TidelogError
from tidelog.common.security.authorization.acl import CLUSTER_NAME, Operation, ResourceType
from tidelog.common.security.quotas.quota import QuotaKind
from tidelog.common.settings import BrokerSettings, SecuritySettings
from tidelog.server_common.loop_slices import LoopSlices
from tidelog.server_common.security.authorization.access_control import AccessControl, Role
from tidelog.v1 import broker_pb2, broker_pb2_grpc, coordinator_pb2

__all__ = ["BrokerService"]


log = structlog.get_logger(__name__)

PRODUCE_TIMEOUT_MS_MAX: Final = 300_000  # bound on a produce request's acks=all wait
EARLIEST: Final = -2
LATEST: Final = -1

NONE: Final = "NONE"  # Kafka's name for "no error"
Context: TypeAlias = "grpc.aio.ServicerContext[Any, Any]"


class BrokerService(broker_pb2_grpc.BrokerServicer):
    def __init__(
        self,
        replicas: ReplicaManager,
        metadata: MetadataCache,
        producer_ids: ProducerIdManager,
        etcd: Etcd3Client | None = None,
        *,
        settings: BrokerSettings,
        access: AccessControl | None = None,
        quotas: QuotaManager | None = None,
        channels: ChannelPool | None = None,
    ) -> None:
        self.settings = settings
        self.replicas = replicas
        self.metadata = metadata
        self.producer_ids = producer_ids
        self.etcd = etcd
        self.access = access or AccessControl(SecuritySettings.from_configs())
        self.quotas = quotas or QuotaManager(None, settings)
        enabled = settings.transaction_partition_verification_enable
        self.verifier = TxnVerifier(
            etcd, metadata, channels, self.access, enabled=enabled
        )  # (channels: to coordinators)

    def _leader_hint(self, topic: str, partition: int) -> tuple[int, int]:
        hosted = self.replicas.partitions.get((topic, partition))
        return newest_leader(hosted.state if hosted is not None else None, self.metadata.state_of(topic, partition))

    async def Produce(  # noqa: N802
        self,
        request: broker_pb2.ProduceRequest,
        context: Context,
        *,
        on_appended: Callable[[], None] | None = None,
    ) -> broker_pb2.ProduceResponse:
        """`on_appended` (the Kafka listener's): called once the request's batches are in the
        leaders' logs (or refused), before any wait for the ISR, so that the listener may start
        the connection's next request without reordering appends."""
        quota_client = None
        if self.quotas.active:
            quota_client = self.quotas.client_of(context)
            await self.quotas.wait_unmuted(quota_client)  # a client throttled before waits it out here
        started = time.perf_counter()
        response = broker_pb2.ProduceResponse()
        if request.acks not in (-1, 0, 1):
            for entry in request.partitions:
                response.partitions.add(
                    topic=entry.topic,
                    partition=entry.partition,
                    error_code=int(ErrorCode.INVALID_REQUIRED_ACKS),
                    error_message=f"acks must be -1, 0 or 1, not {request.acks}",
                )
            REQUESTS.labels("Produce", ErrorCode.INVALID_REQUIRED_ACKS.name).inc()
            return response
        refused = self._topics_refused(context, Operation.WRITE, (entry.topic for entry in request.partitions))
        coordinator = self.access.has_role(caller := self.access.caller(context), Role.COORDINATOR)
        unverified = await self.verifier.refusals(request, caller, coordinator) if self.verifier.enabled else {}
        # Partitions append together; the entries of one partition go in request order, a round
        # each, so its batches keep their order; with acks=all every ISR is awaited once, after all.
        timeout_s = min(max(request.timeout_ms, 0), PRODUCE_TIMEOUT_MS_MAX) / 1000 or 30.0
        results: list[broker_pb2.ProducePartitionResult | None] = [None] * len(request.partitions)
        admitted: list[int] = []
        for index, entry in enumerate(request.partitions):
            if entry.topic in refused:
                results[index] = refused_produce(entry, refused[entry.topic])
            elif index in unverified:
                results[index] = refused_produce(entry, unverified[index].message, unverified[index].code)
            else:
                admitted.append(index)
        entries = request.partitions
        rounds = in_rounds(admitted, lambda index: (entries[index].topic, entries[index].partition))
        await produce_rounds(
            self.replicas, request, rounds, results, timeout_s, coordinator, self._leader_hint, on_appended=on_appended
        )
        response.partitions.extend(result for result in results if result is not None)
        REQUESTS.labels("Produce", NONE).inc()
        elapsed = time.perf_counter() - started
        TOTAL_TIME_MS.labels("Produce").observe(elapsed * 1000)
        if quota_client is not None:
            produced = sum(len(entry.record_batches) for entry in request.partitions)
            response.throttle_time_ms = max(
                self.quotas.record(quota_client, QuotaKind.PRODUCER_BYTE_RATE, produced),
                self.quotas.record(quota_client, QuotaKind.REQUEST_PERCENTAGE, elapsed * 100),
            )
        return response

    async def InitProducerId(  # noqa: N802
        self, request: broker_pb2.InitProducerIdRequest, context: Context
    ) -> broker_pb2.InitProducerIdResponse:
        response = broker_pb2.InitProducerIdResponse(producer_id=-1, producer_epoch=-1)
        caller = self.access.caller(context)
        if not (
            self.access.allowed(caller, Operation.IDEMPOTENT_WRITE, ResourceType.CLUSTER, CLUSTER_NAME)
            or self.access.allowed_on_some(caller, Operation.WRITE, ResourceType.TOPIC)
        ):
            response.error_code = int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
            response.error_message = f"{caller} may not write: IdempotentWrite on the Cluster or Write on a topic"
            REQUESTS.labels("InitProducerId", ErrorCode.CLUSTER_AUTHORIZATION_FAILED.name).inc()
            return response
        if request.transactional_id:
            response.error_code = int(ErrorCode.INVALID_REQUEST)
            response.error_message = "a transactional producer's id comes from its transaction coordinator"
            REQUESTS.labels("InitProducerId", ErrorCode.INVALID_REQUEST.name).inc()
            return response
        try:
            response.producer_id = await self.producer_ids.next_id()
        except Exception as error:  # etcd unreachable: the client retries
            log.warning("producer_id_claim_failed", error=str(error))
            response.error_code = int(ErrorCode.COORDINATOR_NOT_AVAILABLE)
            response.error_message = f"no producer id block could be claimed: {error}"
            REQUESTS.labels("InitProducerId", ErrorCode.COORDINATOR_NOT_AVAILABLE.name).inc()
            return response
        response.producer_epoch = 0
        REQUESTS.labels("InitProducerId", NONE).inc()
        return response

    async def FindCoordinator(  # noqa: N802
        self, request: coordinator_pb2.FindCoordinatorRequest, context: Context
    ) -> coordinator_pb2.FindCoordinatorResponse:
        return await find_coordinator(request, self.access.caller(context), self.access, self.metadata, self.etcd)

    async def Fetch(self, request: broker_pb2.FetchRequest, context: Context) -> broker_pb2.FetchResponse:  # noqa: N802
        started = time.perf_counter()
        limit = self.settings.fetch_max_bytes  # the most one response carries
        max_bytes = min(request.max_bytes if request.max_bytes > 0 else limit, limit)
        deadline = time.monotonic() + min(max(request.max_wait_ms, 0), self.settings.fetch_max_wait_ms_max) / 1000
        follower = request.replica_id >= 0
        kind = "FetchFollower" if follower else "Fetch"  # as Kafka's RequestMetrics tell them apart
        # Once per request: a long poll that wakes up is the same fetch, not a new sign of life.
        if self.access.enabled:
            unauthorised = self._fetch_refused(context, request, follower)
            if unauthorised:
                return unauthorised
        quota_client = None
        if self.quotas.active and not follower:  # replication is not a client: never throttled
            quota_client = self.quotas.client_of(context)
            await self.quotas.wait_unmuted(quota_client)
        session = None
        if request.incremental:
            owner = "" if follower else self.session_owner(context)
            try:
                session = self.replicas.fetch_sessions.resolve(request, owner)
            except SessionError as error:
                REQUESTS.labels(kind, error.code.name).inc()
                return broker_pb2.FetchResponse(error_code=int(error.code), error_message=error.message)
            if (
                session is not None
                and self.access.enabled
                and not follower
                and self._topics_refused(context, Operation.READ, {topic for topic, _ in session.partitions})
            ):
                # What the session holds is read too: the caller must still be allowed every topic.
                # Checked by topic at each fetch; the refusal is built per partition only when refused.
                held = broker_pb2.FetchRequest(partitions=list(session.partitions.values()))
                self.replicas.fetch_sessions.close(session)
                refusal = self._fetch_refused(context, held, follower)
                assert refusal is not None, "a refused topic makes a refusal"
                return refusal
        if session is not None:
            reads = await session_reads(self.replicas, request, session, max_bytes, deadline=deadline, kind=kind)
            response = broker_pb2.FetchResponse(session_id=session.id)
            read_s = 0.0
        else:
            reads, read_s = await full_reads(self.replicas, request, max_bytes, deadline=deadline, kind=kind)
            response = broker_pb2.FetchResponse()
        for read in reads:  # each byte string is copied once, into the response
            # Fields left at their defaults are not passed: a keyword costs each of the thousands
            # of partitions a follower's or a wide consumer's answer carries (3.7 -> 2.9 us each).
            entry = response.partitions.add(
                topic=read.topic,
                partition=read.partition,
                high_watermark=read.high_watermark,
                log_start_offset=read.log_start_offset,
                log_end_offset=read.log_end_offset,
                record_batches=read.data,
                last_stable_offset=read.last_stable_offset,
            )
            if read.error_code:
                entry.error_code, entry.error_message = read.error_code, read.error_message
                entry.leader_hint, entry.leader_hint_epoch = self._leader_hint(read.topic, read.partition)
            if read.aborted:
                entry.aborted_transactions.extend(
                    broker_pb2.AbortedTransaction(producer_id=producer_id, first_offset=first_offset)
                    for producer_id, first_offset in read.aborted
                )
        REQUESTS.labels(kind, NONE).inc()
        TOTAL_TIME_MS.labels(kind).observe((time.perf_counter() - started) * 1000)
        if quota_client is not None:
            fetched = sum(len(read.data) for read in reads)
            response.throttle_time_ms = max(
                self.quotas.record(quota_client, QuotaKind.CONSUMER_BYTE_RATE, fetched),
                self.quotas.record(quota_client, QuotaKind.REQUEST_PERCENTAGE, read_s * 100),
            )
        return response

    async def ListOffsets(  # noqa: N802
        self, request: broker_pb2.ListOffsetsRequest, context: Context
    ) -> broker_pb2.ListOffsetsResponse:
        response = broker_pb2.ListOffsetsResponse()
        refused = self._topics_refused(context, Operation.DESCRIBE, (entry.topic for entry in request.partitions))
        for entry in request.partitions:
            result = response.partitions.add(topic=entry.topic, partition=entry.partition, offset=-1, timestamp=-1)
            if entry.topic in refused:
                result.error_code = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                continue
            try:
                partition_log = self.replicas.leader_partition(entry.topic, entry.partition).log
                result.log_start_offset = partition_log.log_start_offset
                result.high_watermark = partition_log.high_watermark
                result.last_stable_offset = partition_log.last_stable_offset
                readable_end = (  # Kafka's fetchOffsetForTimestamp bounds each by the isolation level
                    result.last_stable_offset if request.isolation_level == READ_COMMITTED else result.high_watermark
                )
                if entry.timestamp == EARLIEST:
                    result.offset = result.log_start_offset
                elif entry.timestamp == LATEST:
                    result.offset = readable_end
                else:
                    found = await self.replicas.io.run(
                        partition_log.offset_for_timestamp, entry.timestamp, request="ListOffsets"
                    )
                    if found is not None and found[0] < readable_end:
                        result.offset, result.timestamp = found
            except TidelogError as error:
                result.error_code = int(error.code)
                result.leader_hint, result.leader_hint_epoch = self._leader_hint(entry.topic, entry.partition)
        REQUESTS.labels("ListOffsets", NONE).inc()
        return response

    async def OffsetsForLeaderEpoch(  # noqa: N802
        self, request: broker_pb2.OffsetsForLeaderEpochRequest, context: Context
    ) -> broker_pb2.OffsetsForLeaderEpochResponse:
        refusal: ErrorCode | None = None  # the error for the topics `allowed` refuses
        allowed: dict[str, bool] = {}
        if self.access.enabled:
            caller = self.access.caller(context)
            if request.replica_id >= 0:
                allowed = {query.topic: self.access.has_role(caller, Role.BROKER) for query in request.partitions}
            else:
                allowed = {
                    query.topic: self.access.allowed(caller, Operation.DESCRIBE, ResourceType.TOPIC, query.topic)
                    for query in request.partitions
                }
            if not all(allowed.values()):
                refusal = (
                    ErrorCode.CLUSTER_AUTHORIZATION_FAILED
                    if request.replica_id >= 0
                    else ErrorCode.TOPIC_AUTHORIZATION_FAILED
                )
        REQUESTS.labels("OffsetsForLeaderEpoch", NONE if refusal is None else refusal.name).inc()
        if refusal is None and request.replica_id >= 0:
            await until_any_epoch_known(self.replicas, request.partitions)
        # A follower back from a restart asks for thousands at once (loop_slices.py).
        answers = []
        pacer = LoopSlices()
        for query in request.partitions:
            await pacer.pace()
            if refusal is not None and not allowed[query.topic]:
                answers.append(
                    broker_pb2.EpochEndOffset(
                        topic=query.topic,
                        partition=query.partition,
                        error_code=int(refusal),
                        leader_epoch=-1,
                        end_offset=-1,
                    )
                )
            else:
                answers.append(self.replicas.end_offset_for_epoch(query))
        return broker_pb2.OffsetsForLeaderEpochResponse(partitions=answers)

    async def Metadata(self, request: broker_pb2.MetadataRequest, context: Context) -> broker_pb2.MetadataResponse:  # noqa: N802
        if not self.metadata.initialised:
            # A broker that (re)started and has not yet been sent the cluster's state would answer
            # "no such topic" and "no brokers": clients would forget what they know. As a KRaft
            # broker serves no clients before it has caught up, it refuses, and clients ask another.
            REQUESTS.labels("Metadata", "UNAVAILABLE").inc()
            await context.abort(grpc.StatusCode.UNAVAILABLE, "this broker has no cluster metadata yet")
        if self.replicas.isolated():  # cut off from etcd and followers: its view is stale (ReplicaManager.fence)
            REQUESTS.labels("Metadata", "UNAVAILABLE").inc()
            await context.abort(grpc.StatusCode.UNAVAILABLE, "this broker lost its etcd session: ask another broker")
        REQUESTS.labels("Metadata", NONE).inc()
        response = self.metadata.describe(list(request.topics))
        if self.access.enabled:
            self._hide_unauthorised(context, response, listing=not request.topics)
        return response

    def _hide_unauthorised(self, context: Context, response: broker_pb2.MetadataResponse, *, listing: bool) -> None:
        """Topics the caller may not Describe: left out of a listing; named ones answer
        TOPIC_AUTHORIZATION_FAILED without their partitions or configs (as Kafka)."""
        caller = self.access.caller(context)
        kept = []
        for topic in response.topics:
            if self.access.allowed(caller, Operation.DESCRIBE, ResourceType.TOPIC, topic.name):
                kept.append(topic)
            elif not listing:
                kept.append(
                    broker_pb2.TopicMetadata(name=topic.name, error_code=int(ErrorCode.TOPIC_AUTHORIZATION_FAILED))
                )
        del response.topics[:]
        response.topics.extend(kept)

    def _topics_refused(self, context: Context, operation: Operation, topics: Any) -> dict[str, str]:
        """The topics of a request the caller may not `operation`, with the reason."""
        if not self.access.enabled:
            return {}
        caller = self.access.caller(context)
        return {
            topic: f"{caller} may not {operation.value} topic {topic!r}"
            for topic in set(topics)
            if not self.access.allowed(caller, operation, ResourceType.TOPIC, topic)
        }

    def session_owner(self, context: Any) -> str:
        """Who a consumer's fetch session belongs to: its principal (and the identity that logged in,
        for a gateway's calls on behalf of a REST caller)."""
        caller = self.access.caller(context)
        return f"{caller.principal}" + (f" via {caller.authenticated}" if caller.authenticated else "")

    def _fetch_refused(
        self, context: Context, request: broker_pb2.FetchRequest, follower: bool
    ) -> broker_pb2.FetchResponse | None:
        """The answer to a fetch the caller may not make at all or in part; None when it may."""
        caller = self.access.caller(context)
        if follower:
            if self.access.has_role(caller, Role.BROKER):
                return None
            reason = f"{caller} is not a broker (broker.principals): it may not fetch as replica {request.replica_id}"
            code, reasons = (
                ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                {entry.topic: reason for entry in request.partitions},
            )
        else:
            reasons = self._topics_refused(context, Operation.READ, (entry.topic for entry in request.partitions))
            if not reasons:
                return None
            code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        # Kafka answers a fetch with unauthorised partitions with the error on those partitions
        # only; this one answers the whole request at once so nothing is read for it.
        response = broker_pb2.FetchResponse()
        for entry in request.partitions:
            refused = entry.topic in reasons
            response.partitions.add(
                topic=entry.topic,
                partition=entry.partition,
                error_code=int(code) if refused else 0,
                error_message=reasons.get(entry.topic, "not read: the request named partitions it may not read"),
                high_watermark=-1,
                log_start_offset=-1,
                log_end_offset=-1,
            )
        REQUESTS.labels("FetchFollower" if follower else "Fetch", code.name).inc()
        return response

    async def LeaderAndIsr(  # noqa: N802
        self, request: broker_pb2.LeaderAndIsrRequest, context: Context
    ) -> broker_pb2.LeaderAndIsrResponse:
        if not self.access.has_role(self.access.caller(context), Role.CONTROLLER):
            REQUESTS.labels("LeaderAndIsr", ErrorCode.CLUSTER_AUTHORIZATION_FAILED.name).inc()
            return broker_pb2.LeaderAndIsrResponse(error_code=int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED))
        try:
            self.replicas.states.check_controller_epoch(request.controller_epoch)
            self.metadata.note_shutting_down(request.controller_epoch, request.shutting_down_brokers)
            self.metadata.note_lives(request.controller_epoch, request.live_leaders)
            errors = await self.replicas.states.leader_and_isr(request)
        except TidelogError as error:  # a stale controller epoch, or a request for another broker life
            REQUESTS.labels("LeaderAndIsr", error.code.name).inc()
            return broker_pb2.LeaderAndIsrResponse(error_code=int(error.code))
        REQUESTS.labels("LeaderAndIsr", NONE).inc()
        return broker_pb2.LeaderAndIsrResponse(partitions=errors)

    async def StopReplica(  # noqa: N802
        self, request: broker_pb2.StopReplicaRequest, context: Context
    ) -> broker_pb2.StopReplicaResponse:
        if not self.access.has_role(self.access.caller(context), Role.CONTROLLER):
            REQUESTS.labels("StopReplica", ErrorCode.CLUSTER_AUTHORIZATION_FAILED.name).inc()
            return broker_pb2.StopReplicaResponse(error_code=int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED))
        try:
            await self.replicas.states.stop_replicas(request)
        except TidelogError as error:
            return broker_pb2.StopReplicaResponse(error_code=int(error.code))
        return broker_pb2.StopReplicaResponse()

    async def UpdateMetadata(  # noqa: N802
        self, request: broker_pb2.UpdateMetadataRequest, context: Context
    ) -> broker_pb2.UpdateMetadataResponse:
        if not self.access.has_role(self.access.caller(context), Role.CONTROLLER):
            REQUESTS.labels("UpdateMetadata", ErrorCode.CLUSTER_AUTHORIZATION_FAILED.name).inc()
            return broker_pb2.UpdateMetadataResponse(error_code=int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED))
        try:
            self.replicas.states.check_controller_epoch(request.controller_epoch)
        except StaleControllerEpochError:
            return broker_pb2.UpdateMetadataResponse(error_code=int(ErrorCode.STALE_CONTROLLER_EPOCH))
        self.metadata.update(request)
        return broker_pb2.UpdateMetadataResponse()

    async def WriteTxnMarkers(  # noqa: N802
        self, request: broker_pb2.WriteTxnMarkersRequest, context: Context
    ) -> broker_pb2.WriteTxnMarkersResponse:
        """Transaction coordinators end transactions, and administrators allowed ClusterAction on the
        Cluster abort hanging ones (KIP-664)."""
        caller = self.access.caller(context)
        if not (
            self.access.has_role(caller, Role.COORDINATOR)
            or self.access.allowed(caller, Operation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME)
        ):
            REQUESTS.labels("WriteTxnMarkers", ErrorCode.CLUSTER_AUTHORIZATION_FAILED.name).inc()
            return refused_markers(request, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
        remaining = context.time_remaining()
        timeout_s = MARKER_TIMEOUT_S if remaining is None else min(remaining, MARKER_TIMEOUT_S)
        response = await write_txn_markers(self.replicas, request, timeout_s=timeout_s)
        REQUESTS.labels("WriteTxnMarkers", NONE).inc()
        return response

    async def DescribeProducers(  # noqa: N802
        self, request: broker_pb2.DescribeProducersRequest, context: Context
    ) -> broker_pb2.DescribeProducersResponse:
        caller = self.access.caller(context)
        REQUESTS.labels("DescribeProducers", NONE).inc()
        return describe_producers(
            self.replicas, request, lambda topic: self.access.allowed(caller, Operation.READ, ResourceType.TOPIC, topic)
        )
