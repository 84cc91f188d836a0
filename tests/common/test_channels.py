"""The channel pool against real gRPC servers on loopback: a channel left failing while its peer was
down is replaced, and the new one connects at once."""

from __future__ import annotations

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tidelog.common.channels import ChannelPool
from tidelog.dev.etcd_server import free_port
from tidelog.server_common.runtime import grpc_server


async def _check(pool: ChannelPool, endpoint: str) -> grpc.StatusCode:
    try:
        await health_pb2_grpc.HealthStub(pool.channel(endpoint)).Check(health_pb2.HealthCheckRequest(), timeout=5)
    except grpc.aio.AioRpcError as error:
        return error.code()
    return grpc.StatusCode.OK


async def test_a_channel_failing_since_its_peer_was_down_is_replaced_and_connects_at_once() -> None:
    endpoint = f"127.0.0.1:{free_port()}"
    pool = ChannelPool()
    try:
        assert not pool.forget_failed(endpoint)  # no channel yet: nothing to forget
        # The peer is down: a few calls fail, and gRPC's reconnect backoff grows towards its 1 s.
        for _ in range(5):
            assert await _check(pool, endpoint) == grpc.StatusCode.UNAVAILABLE
        failing = pool.channel(endpoint)
        assert failing.get_state() == grpc.ChannelConnectivity.TRANSIENT_FAILURE
        server, _ = grpc_server()
        server.add_insecure_port(endpoint)
        await server.start()
        try:
            # Back: the failing channel would fail fast until its backoff ran out; a new one,
            # with connections of its own (not the old channel's, shared), connects now.
            assert pool.forget_failed(endpoint)
            assert pool.channel(endpoint) is not failing
            assert await _check(pool, endpoint) == grpc.StatusCode.OK
            assert not pool.forget_failed(endpoint)  # a working channel is kept
            assert pool.channel(endpoint).get_state() == grpc.ChannelConnectivity.READY
        finally:
            await server.stop(None)
    finally:
        await pool.close()


async def test_two_channels_to_one_address_do_not_share_a_failed_connection() -> None:
    # gRPC shares a connection between channels to one address unless told not to: the
    # replacement above would then inherit the failed one's backoff.
    endpoint = f"127.0.0.1:{free_port()}"
    first, second = ChannelPool(), ChannelPool()
    try:
        for _ in range(5):
            assert await _check(first, endpoint) == grpc.StatusCode.UNAVAILABLE
        server, _ = grpc_server()
        server.add_insecure_port(endpoint)
        await server.start()
        try:
            assert await _check(second, endpoint) == grpc.StatusCode.OK
        finally:
            await server.stop(None)
    finally:
        await first.close()
        await second.close()
