"""The controller process: `python -m tidelog.controller.main --id 1 --port 9190 --etcd 127.0.0.1:2379`."""

from __future__ import annotations

import argparse
import asyncio
import contextlib

import structlog
from etcd3aio import Etcd3Client

from tidelog.common.runtime import configure_logging, grpc_server, mark_serving, start_metrics, stop_on_signals
from tidelog.controller.admin_service import AdminService
from tidelog.controller.controller import Controller
from tidelog.controller.controller_config import ControllerConfig
from tidelog.v1 import controller_pb2_grpc

log = structlog.get_logger(__name__)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Tidelog controller")
    parser.add_argument("--id", type=int, required=True, help="controller id")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--advertised-host", help="host clients are told to use (default: --host)")
    parser.add_argument("--port", type=int, required=True, help="admin gRPC port")
    parser.add_argument("--metrics-port", type=int, default=0)
    parser.add_argument("--etcd", required=True, help="etcd endpoint host:port")
    parser.add_argument("--num-partitions", type=int, default=1)
    parser.add_argument("--default-replication-factor", type=int, default=1)
    parser.add_argument("--delete-topic-enable", choices=["true", "false"], default="true")
    parser.add_argument("--session-timeout-ms", type=int, default=6000)
    parser.add_argument("--auto-leader-rebalance-enable", choices=["true", "false"], default="true")
    parser.add_argument("--leader-imbalance-check-interval-seconds", type=float, default=300.0)
    parser.add_argument("--leader-imbalance-per-broker-percentage", type=int, default=10)
    return parser.parse_args(argv)


async def serve(args: argparse.Namespace) -> None:
    configure_logging("controller", controller_id=args.id)
    start_metrics(args.metrics_port)
    config = ControllerConfig(
        controller_id=args.id,
        endpoint=f"{args.advertised_host or args.host}:{args.port}",
        num_partitions=args.num_partitions,
        default_replication_factor=args.default_replication_factor,
        delete_topic_enable=args.delete_topic_enable == "true",
        session_ttl_s=max(1, args.session_timeout_ms // 1000),
        auto_leader_rebalance_enable=args.auto_leader_rebalance_enable == "true",
        leader_imbalance_check_interval_s=args.leader_imbalance_check_interval_seconds,
        leader_imbalance_per_broker_percentage=args.leader_imbalance_per_broker_percentage,
    )
    stopping = stop_on_signals()
    etcd = Etcd3Client([args.etcd])
    await etcd.connect()
    controller = Controller(config, etcd)
    server, health = grpc_server()
    controller_pb2_grpc.add_ControllerServicer_to_server(AdminService(controller), server)
    server.add_insecure_port(f"{args.host}:{args.port}")
    await server.start()
    await mark_serving(health, ["tidelog.v1.Controller"])
    log.info("controller_started", endpoint=config.endpoint, etcd=args.etcd)
    running = asyncio.create_task(controller.run())
    await stopping.wait()
    log.info("controller_stopping")
    await mark_serving(health, ["tidelog.v1.Controller"], serving=False)
    await controller.stop()
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.wait_for(running, timeout=10)
    await server.stop(grace=2)
    await controller.broker_requests.close()
    await etcd.close()
    log.info("controller_stopped")


def main(argv: list[str] | None = None) -> None:
    asyncio.run(serve(parse_args(argv)))


if __name__ == "__main__":
    main()
