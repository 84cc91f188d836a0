"""The controller's requests to brokers: LeaderAndIsr, UpdateMetadata, StopReplica.

What a push carries (whole, or what changed since the broker's view) is `state_delta`'s; here the
requests travel. Requests are idempotent and the newest wins: a broker keeps whichever state has
the higher controller epoch and partition epoch. A broker that cannot be reached is skipped and
gets the whole state at the next push.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping
from typing import Final

import grpc
import structlog

from tidelog.common.channels import ChannelPool
from tidelog.common.errors import ErrorCode
from tidelog.controller.state_delta import StatePush
from tidelog.server_common.metadata import BrokerRegistration
from tidelog.v1 import broker_pb2, broker_pb2_grpc, common_pb2

__all__ = ["BrokerRequests"]

log = structlog.get_logger(__name__)
NEW_REPLICA_ALLOWANCE_S: Final = 0.003  # added to a LeaderAndIsr deadline per partition it carries
SLOW_PUSH_S: Final = 0.5  # a push this slow is logged, with where its time went


class BrokerRequests:
    def __init__(self, *, timeout_s: float = 5.0, channels: ChannelPool | None = None) -> None:
        self.timeout_s = timeout_s
        self._channels = channels or ChannelPool()

    def _stub(self, endpoint: str) -> broker_pb2_grpc.BrokerStub:
        # A broker back from a crash on its old address: the channel that failed while it was down
        # would fail the first push in its reconnect backoff, and the push wait for the next resync
        # (a second, at a restart the bench times). The controller paces its own attempts.
        self._channels.forget_failed(endpoint)
        return broker_pb2_grpc.BrokerStub(self._channels.channel(endpoint))

    async def send_push(self, broker: BrokerRegistration, push: StatePush) -> set[tuple[str, int]] | None:
        """LeaderAndIsr then UpdateMetadata to one broker: the partitions it refused (to be sent
        again), or None when it was not reached (what it holds is unknown: the next push is whole)."""
        leader_and_isr, update = push.leader_and_isr, push.update_metadata
        stub = self._stub(broker.endpoint)
        try:
            # A broker new to thousands of replicas creates a log for each the first time (about a
            # millisecond apiece): the deadline grows with the request, or a big first push would be
            # cut off and sent again and again, never done.
            timeout = self.timeout_s + len(leader_and_isr.partitions) * NEW_REPLICA_ALLOWANCE_S
            started = time.perf_counter()
            response = await stub.LeaderAndIsr(leader_and_isr, timeout=timeout)
            applied = time.perf_counter()
            if response.error_code:
                log.warning(
                    "leader_and_isr_refused", broker=broker.broker_id, error=ErrorCode(response.error_code).name
                )
                return None
            refused = {(error.topic, error.partition) for error in response.partitions}
            metadata_response = await stub.UpdateMetadata(update, timeout=self.timeout_s)
            if time.perf_counter() - started >= SLOW_PUSH_S:
                log.info(
                    "slow_push",
                    broker=broker.broker_id,
                    partitions=len(leader_and_isr.partitions),
                    leader_and_isr_s=round(applied - started, 3),
                    update_metadata_s=round(time.perf_counter() - applied, 3),
                )
            if metadata_response.error_code:
                log.warning(
                    "update_metadata_refused",
                    broker=broker.broker_id,
                    error=ErrorCode(metadata_response.error_code).name,
                )
                return None
            return refused
        except grpc.aio.AioRpcError as error:
            log.info("broker_unreachable", broker=broker.broker_id, code=error.code().name)
            return None

    async def stop_replicas(
        self,
        partitions: Iterable[common_pb2.PartitionState],
        controller_id: int,
        epoch: int,
        brokers: Mapping[int, BrokerRegistration],
        *,
        delete: bool,
    ) -> None:
        by_broker: dict[int, list[common_pb2.PartitionState]] = {}
        for partition in partitions:
            for replica in partition.replicas:
                by_broker.setdefault(replica, []).append(partition)

        async def send(broker: BrokerRegistration, mine: list[common_pb2.PartitionState]) -> None:
            request = broker_pb2.StopReplicaRequest(
                controller_id=controller_id,
                controller_epoch=epoch,
                delete_partitions=delete,
                partitions=mine,
                broker_incarnation=broker.incarnation,
            )
            try:
                await self._stub(broker.endpoint).StopReplica(request, timeout=self.timeout_s)
            except grpc.aio.AioRpcError as error:
                log.info("broker_unreachable", broker=broker.broker_id, code=error.code().name)

        await asyncio.gather(
            *(send(brokers[broker_id], mine) for broker_id, mine in by_broker.items() if broker_id in brokers)
        )

    async def close(self) -> None:
        await self._channels.close()
