"""The controller's requests to brokers: LeaderAndIsr, UpdateMetadata, StopReplica.

State is sent whole (every replica a broker holds; every partition in the cluster), so requests
are idempotent and the newest always wins: a broker keeps whichever state has the higher
controller epoch and partition epoch. A broker that cannot be reached is skipped; it gets the whole
state again when it registers (the controller watches registrations).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable, Mapping
from typing import Final

import grpc
import structlog

from tidelog.common.channels import ChannelPool
from tidelog.common.errors import ErrorCode
from tidelog.common.metadata import BrokerRegistration
from tidelog.controller.cluster_state import ClusterState
from tidelog.v1 import broker_pb2, broker_pb2_grpc, common_pb2

__all__ = ["BrokerRequests"]

log = structlog.get_logger(__name__)
NEW_REPLICA_ALLOWANCE_S: Final = 0.003  # added to a LeaderAndIsr deadline per partition it carries


class BrokerRequests:
    def __init__(self, *, timeout_s: float = 5.0, channels: ChannelPool | None = None) -> None:
        self.timeout_s = timeout_s
        self._channels = channels or ChannelPool()

    def _stub(self, endpoint: str) -> broker_pb2_grpc.BrokerStub:
        return broker_pb2_grpc.BrokerStub(self._channels.channel(endpoint))

    async def send_state(
        self, state: ClusterState, controller_id: int, epoch: int, controller_endpoint: str, broker_id: int
    ) -> bool:
        """Send whole state to one broker; False when it was not reached (to be sent again).

        The requests are built before the first await: they hold the state as of the call.
        """
        broker = state.brokers.get(broker_id)
        if broker is None:
            return True  # gone: it gets everything when it registers again
        configs = {name: json.dumps(topic.value.configs) for name, topic in state.topics.items()}
        partitions = state.all_partition_protos()
        update = broker_pb2.UpdateMetadataRequest(
            controller_id=controller_id,
            controller_epoch=epoch,
            controller_endpoint=controller_endpoint,
            live_brokers=state.broker_protos(),
            partitions=partitions,
            topic_configs_json=configs,
        )
        mine = [partition for partition in partitions if broker_id in partition.replicas]
        leader_and_isr = broker_pb2.LeaderAndIsrRequest(
            controller_id=controller_id,
            controller_epoch=epoch,
            partitions=mine,
            topic_configs_json={partition.topic: configs[partition.topic] for partition in mine},
            live_leaders=state.broker_protos(),
            full=True,
            broker_incarnation=broker.incarnation,
        )
        return await self._send_to(broker, leader_and_isr, update)

    async def _send_to(
        self,
        broker: BrokerRegistration,
        leader_and_isr: broker_pb2.LeaderAndIsrRequest,
        update: broker_pb2.UpdateMetadataRequest,
    ) -> bool:
        stub = self._stub(broker.endpoint)
        try:
            # A broker new to thousands of replicas creates a log for each the first time (about a
            # millisecond apiece): the deadline grows with the request, or a big first push would be
            # cut off and sent again and again, never done.
            timeout = self.timeout_s + len(leader_and_isr.partitions) * NEW_REPLICA_ALLOWANCE_S
            response = await stub.LeaderAndIsr(leader_and_isr, timeout=timeout)
            if response.error_code:
                log.warning(
                    "leader_and_isr_refused", broker=broker.broker_id, error=ErrorCode(response.error_code).name
                )
            metadata_response = await stub.UpdateMetadata(update, timeout=self.timeout_s)
            if metadata_response.error_code:
                log.warning(
                    "update_metadata_refused",
                    broker=broker.broker_id,
                    error=ErrorCode(metadata_response.error_code).name,
                )
            return True
        except grpc.aio.AioRpcError as error:
            log.info("broker_unreachable", broker=broker.broker_id, code=error.code().name)
            return False

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
