"""The transaction coordinator's gRPC service (proto/tidelog/v1/transaction.proto) over a
TxnCoordinator. Errors come back as Kafka's codes in the response: NOT_COORDINATOR sends the
producer to FindCoordinator again; CONCURRENT_TRANSACTIONS and COORDINATOR_LOAD_IN_PROGRESS to
retry shortly.

Authorization as Kafka's: Write on the TransactionalId for every request, and also Write on each
topic added (AddPartitionsToTxn) or Read on the group (AddOffsetsToTxn); a broker's verify_only
check needs a broker identity.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection
from typing import Any, TypeAlias, TypeVar

import grpc

from tidelog.client.connections import Connections
from tidelog.common.errors import ErrorCode, RemoteError, TidelogError
from tidelog.common.security.authorization.acl import Operation, ResourceType
from tidelog.coordinator.coordinator_service import REQUESTS, answered
from tidelog.coordinator.partition_ownership import PartitionOwnership
from tidelog.coordinator.txn_coordinator import TxnCoordinator
from tidelog.server_common.metadata import TRANSACTION_STATE_TOPIC
from tidelog.server_common.security.authorization.access_control import AccessControl, Role
from tidelog.v1 import transaction_pb2, transaction_pb2_grpc

__all__ = ["TxnService"]

Context: TypeAlias = "grpc.aio.ServicerContext[Any, Any]"
R = TypeVar("R")
LIST_TIMEOUT_S = 5.0  # each other instance's answer to ListTransactions


class TxnService(transaction_pb2_grpc.TransactionCoordinatorServicer):
    def __init__(
        self,
        coordinator: TxnCoordinator,
        access: AccessControl,
        *,
        ownership: PartitionOwnership | None = None,
        connections: Connections | None = None,
    ) -> None:
        self.coordinator = coordinator
        self.access = access
        self.ownership = ownership  # where the other instances are (ListTransactions asks them)
        self.connections = connections

    def _check(self, context: Context, transactional_id: str, *, topics: Collection[str] = (), group: str = "") -> None:
        if not self.access.enabled:
            return
        caller = self.access.caller(context)
        if not self.access.allowed(caller, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id):
            raise RemoteError(
                ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                f"{caller} may not Write transactional.id {transactional_id!r}",
            )
        refused = sorted(
            topic for topic in topics if not self.access.allowed(caller, Operation.WRITE, ResourceType.TOPIC, topic)
        )
        if refused:
            raise RemoteError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, f"{caller} may not Write {', '.join(refused)}")
        if group and not self.access.allowed(caller, Operation.READ, ResourceType.GROUP, group):
            raise RemoteError(ErrorCode.GROUP_AUTHORIZATION_FAILED, f"{caller} may not Read group {group!r}")

    async def _answer(self, api: str, response: R, work: Callable[[], Awaitable[R]]) -> R:
        return await answered(api, response, work)

    async def InitProducerId(  # noqa: N802
        self, request: transaction_pb2.TxnInitProducerIdRequest, context: Context
    ) -> transaction_pb2.TxnInitProducerIdResponse:
        async def work() -> transaction_pb2.TxnInitProducerIdResponse:
            self._check(context, request.transactional_id)
            producer_id, epoch = await self.coordinator.init_producer_id(
                request.transactional_id, request.transaction_timeout_ms
            )
            return transaction_pb2.TxnInitProducerIdResponse(producer_id=producer_id, producer_epoch=epoch)

        failed = transaction_pb2.TxnInitProducerIdResponse(producer_id=-1, producer_epoch=-1)
        return await self._answer("InitProducerId", failed, work)

    async def AddPartitionsToTxn(  # noqa: N802
        self, request: transaction_pb2.AddPartitionsToTxnRequest, context: Context
    ) -> transaction_pb2.AddPartitionsToTxnResponse:
        partitions = [(entry.topic, entry.partition) for entry in request.partitions]

        async def work() -> transaction_pb2.AddPartitionsToTxnResponse:
            if request.verify_only:
                if not self.access.has_role(self.access.caller(context), Role.BROKER):
                    raise RemoteError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "only brokers verify transactions")
                for partition in partitions:
                    self.coordinator.verify(
                        request.transactional_id, request.producer_id, request.producer_epoch, partition
                    )
            else:
                self._check(context, request.transactional_id, topics={topic for topic, _ in partitions})
                await self.coordinator.add_partitions(
                    request.transactional_id, request.producer_id, request.producer_epoch, partitions
                )
            return transaction_pb2.AddPartitionsToTxnResponse()

        api = "VerifyTxn" if request.verify_only else "AddPartitionsToTxn"
        return await self._answer(api, transaction_pb2.AddPartitionsToTxnResponse(), work)

    async def AddOffsetsToTxn(  # noqa: N802
        self, request: transaction_pb2.AddOffsetsToTxnRequest, context: Context
    ) -> transaction_pb2.AddOffsetsToTxnResponse:
        async def work() -> transaction_pb2.AddOffsetsToTxnResponse:
            self._check(context, request.transactional_id, group=request.group_id)
            await self.coordinator.add_offsets(
                request.transactional_id, request.producer_id, request.producer_epoch, request.group_id
            )
            return transaction_pb2.AddOffsetsToTxnResponse()

        return await self._answer("AddOffsetsToTxn", transaction_pb2.AddOffsetsToTxnResponse(), work)

    async def EndTxn(  # noqa: N802
        self, request: transaction_pb2.EndTxnRequest, context: Context
    ) -> transaction_pb2.EndTxnResponse:
        async def work() -> transaction_pb2.EndTxnResponse:
            self._check(context, request.transactional_id)
            producer_id, epoch = await self.coordinator.end_transaction(
                request.transactional_id,
                request.producer_id,
                request.producer_epoch,
                request.committed,
                keep_epoch=request.keep_epoch,
            )
            return transaction_pb2.EndTxnResponse(producer_id=producer_id, producer_epoch=epoch)

        return await self._answer("EndTxn", transaction_pb2.EndTxnResponse(producer_id=-1, producer_epoch=-1), work)

    # ---- admin (KIP-664) ----------------------------------------------------------------------

    def _may_describe(self, context: Context, transactional_id: str) -> bool:
        if not self.access.enabled:
            return True
        caller = self.access.caller(context)
        return self.access.allowed(caller, Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, transactional_id)

    async def DescribeTransactions(  # noqa: N802
        self, request: transaction_pb2.DescribeTransactionsRequest, context: Context
    ) -> transaction_pb2.DescribeTransactionsResponse:
        response = transaction_pb2.DescribeTransactionsResponse()
        for transactional_id in request.transactional_ids:
            described = response.transactions.add(transactional_id=transactional_id, transaction_start_time_ms=-1)
            if not self._may_describe(context, transactional_id):
                described.error_code = int(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
                continue
            try:
                metadata = self.coordinator.describe(transactional_id)
            except TidelogError as error:
                described.error_code = int(error.code)
                continue
            described.state = metadata.state.value
            described.producer_id, described.producer_epoch = metadata.producer_id, metadata.producer_epoch
            described.transaction_timeout_ms = metadata.timeout_ms
            described.transaction_start_time_ms = metadata.start_ms if metadata.state.value == "Ongoing" else -1
            described.partitions.extend(
                transaction_pb2.TxnTopicPartition(topic=topic, partition=partition)
                for topic, partition in sorted(metadata.partitions)
            )
        REQUESTS.labels("DescribeTransactions", "NONE").inc()
        return response

    async def ListTransactions(  # noqa: N802
        self, request: transaction_pb2.ListTransactionsRequest, context: Context
    ) -> transaction_pb2.ListTransactionsResponse:
        response = transaction_pb2.ListTransactionsResponse()
        for metadata in self.coordinator.listed(request.state_filters, request.producer_id_filters):
            response.transactions.add(
                transactional_id=metadata.transactional_id, producer_id=metadata.producer_id, state=metadata.state.value
            )
        if not request.local_only and self.ownership is not None and self.connections is not None:
            claims = self.ownership.topics[TRANSACTION_STATE_TOPIC].claims.values()
            local = transaction_pb2.ListTransactionsRequest(
                state_filters=request.state_filters, producer_id_filters=request.producer_id_filters, local_only=True
            )
            for endpoint in sorted({claim.endpoint for claim in claims} - {self.ownership.instance.endpoint}):
                stub = transaction_pb2_grpc.TransactionCoordinatorStub(self.connections.channel(endpoint))
                try:
                    answer = await stub.ListTransactions(local, timeout=LIST_TIMEOUT_S)
                except grpc.aio.AioRpcError as error:
                    response.error_code = int(ErrorCode.COORDINATOR_NOT_AVAILABLE)
                    response.error_message = f"{endpoint} did not answer: {error.code().name}"
                    continue
                response.transactions.extend(answer.transactions)
        listed = sorted(
            (entry for entry in response.transactions if self._may_describe(context, entry.transactional_id)),
            key=lambda entry: str(entry.transactional_id),
        )
        del response.transactions[:]
        response.transactions.extend(listed)
        REQUESTS.labels("ListTransactions", "NONE").inc()
        return response
