"""The controller's pushes against a real gRPC server on loopback: a broker back on its old address
is reached by the first push, not after the channel's reconnect backoff."""

from __future__ import annotations

from typing import Any

from tidelog.common.channels import ChannelPool
from tidelog.controller.broker_requests import BrokerRequests
from tidelog.controller.state_delta import StatePush
from tidelog.dev.etcd_server import free_port
from tidelog.server_common.metadata import BrokerRegistration
from tidelog.server_common.runtime import grpc_server
from tidelog.v1 import broker_pb2, broker_pb2_grpc


class _Broker(broker_pb2_grpc.BrokerServicer):
    def __init__(self) -> None:
        self.pushes = 0

    async def LeaderAndIsr(self, request: Any, context: Any) -> broker_pb2.LeaderAndIsrResponse:  # noqa: N802
        self.pushes += 1
        return broker_pb2.LeaderAndIsrResponse()

    async def UpdateMetadata(self, request: Any, context: Any) -> broker_pb2.UpdateMetadataResponse:  # noqa: N802
        return broker_pb2.UpdateMetadataResponse()


def _push() -> StatePush:
    return StatePush(
        leader_and_isr=broker_pb2.LeaderAndIsrRequest(full=True),
        update_metadata=broker_pb2.UpdateMetadataRequest(),
        view=None,  # type: ignore[arg-type]  # (not read by the requests)
        brokers_changed=True,
    )


async def test_a_broker_back_on_its_address_gets_the_first_push_after_it_returns() -> None:
    port = free_port()
    registration = BrokerRegistration(broker_id=3, host="127.0.0.1", port=port, incarnation="second-life")
    requests = BrokerRequests(timeout_s=2.0, channels=ChannelPool())
    try:
        # The broker is down (killed): pushes fail, and the channel's reconnect backoff grows.
        for _ in range(5):
            assert await requests.send_push(registration, _push()) is None
        server, _ = grpc_server()
        broker = _Broker()
        broker_pb2_grpc.add_BrokerServicer_to_server(broker, server)
        server.add_insecure_port(registration.endpoint)
        await server.start()
        try:
            # Registered again: the first push reaches it (the failing channel would have failed
            # it fast until its backoff ran out, and the push waited for the next resync).
            assert await requests.send_push(registration, _push()) == set()
            assert broker.pushes == 1
        finally:
            await server.stop(None)
    finally:
        await requests.close()
