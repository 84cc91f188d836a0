"""Broker CPU per record when clients keep one acks=all record in flight per partition.

    .venv/bin/python bench/bench_in_flight.py [--partitions 6] [--seconds 10]

The traffic most applications send — a few small records at a time, each waiting for its
acknowledgement — costs the brokers per request, not per byte: a leader append, a read for each
follower, an append on each, the high watermark's round. Starts etcd, 2 controllers and 3 brokers
(tidelog.dev.local_cluster), one topic (RF 3, min.insync.replicas 2), and in this process one
writer per partition, each sending a 100-byte record with acks=all and waiting for it before the
next. Prints records/s and the brokers' CPU (user + system, from /proc) per record.

Reference printed in the same run: the CPU of one gRPC unary round trip on this machine (a
server and a client in this process, an empty request), so the figure reads as "round trips'
worth of CPU per record" and survives a slower or busier machine. ADR 0036 has the before/after.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from tidelog.client import AdminClient, Producer
from tidelog.dev.local_cluster import LocalCluster

TOPIC = "in-flight"
VALUE_BYTES = 100
TICKS = os.sysconf("SC_CLK_TCK")
ROUND_TRIPS = 5_000


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


async def round_trip_cpu_ms() -> float:
    """CPU (this process, client and server) of one unary gRPC call on loopback."""
    server = grpc.aio.server()
    health_pb2_grpc.add_HealthServicer_to_server(health.aio.HealthServicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            request = health_pb2.HealthCheckRequest()
            for _ in range(200):  # warm
                await stub.Check(request)
            started = time.process_time()
            for _ in range(ROUND_TRIPS):
                await stub.Check(request)
            return (time.process_time() - started) * 1000 / ROUND_TRIPS
    finally:
        await server.stop(None)


async def write_in_flight(cluster: LocalCluster, partitions: int, seconds: float) -> tuple[float, float]:
    """(records/s, broker CPU ms per record) over `seconds` of steady writing."""
    brokers = [process.pid for name, process in cluster.processes.items() if name.startswith("broker")]
    acknowledged = 0
    stop = asyncio.Event()
    value = os.urandom(VALUE_BYTES)
    async with Producer(cluster.bootstrap, acks="all", linger_ms=0) as producer:

        async def write(partition: int) -> None:
            nonlocal acknowledged
            while not stop.is_set():
                await (await producer.send(TOPIC, value, partition=partition))
                acknowledged += 1

        writers = [asyncio.create_task(write(partition)) for partition in range(partitions)]
        await asyncio.sleep(2.0)  # connections, metadata, the first rounds
        counted, cpu, started = acknowledged, sum(map(cpu_seconds, brokers)), time.monotonic()
        await asyncio.sleep(seconds)
        records = acknowledged - counted
        used = sum(map(cpu_seconds, brokers)) - cpu
        elapsed = time.monotonic() - started
        stop.set()
        await asyncio.gather(*writers)
    return records / elapsed, used * 1000 / max(records, 1)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    reference_ms = await round_trip_cpu_ms()
    with tempfile.TemporaryDirectory(prefix="tidelog-bench-in-flight-") as folder:
        cluster = LocalCluster(Path(folder), brokers=3, controllers=2)
        cluster.start()
        try:
            await cluster.wait_ready()
            async with AdminClient(cluster.bootstrap, controllers=cluster.controller_endpoints) as admin:
                await admin.create_topic(TOPIC, args.partitions, 3, {"min.insync.replicas": "2"})
            rate, per_record_ms = await write_in_flight(cluster, args.partitions, args.seconds)
        finally:
            cluster.stop()
    print(f"one acks=all record in flight per partition, {args.partitions} partitions, RF 3, 3 brokers:")
    print(f"  records/s                                   {rate:10,.0f}")
    print(f"  broker CPU per record (3 brokers)           {per_record_ms:10.2f} ms")
    print(f"  reference: one gRPC unary round trip's CPU  {reference_ms:10.3f} ms (client + server, this process)")
    print(f"  per record, in round trips' worth of CPU    {per_record_ms / reference_ms:10.1f}")


if __name__ == "__main__":
    asyncio.run(main())
