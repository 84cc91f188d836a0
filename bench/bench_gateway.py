"""REST gateway benchmark: produce and consume over HTTP through a gateway process.

    .venv/bin/python bench/bench_gateway.py [--seconds 10] [--connections 8]

Starts etcd, 2 controllers, 3 brokers, 2 group coordinators and one gateway (tidelog.dev.local_cluster),
a topic of 6 partitions (RF 1), then from this process (a minimal HTTP/1.1 keep-alive client on raw
asyncio streams, so the load generator costs little of the machine's two cores):
- batched JSON produce: 500 records per POST, 100-byte values, `--connections` requests in flight
  (issue 6's target: >= 100,000 records/s);
- single-record produce at a steady 1,000 requests/s: p50 / p99 latency (target p99 <= 20 ms);
- consume: a binary consumer instance assigned every partition polls everything back: records/s
  (one GET kept in flight ahead of the answer being read, HTTP/1.1 pipelining). Printed twice:
  the generator counting records (parsing 1 answer in 16 to check), which is the gateway's rate,
  and the generator parsing every answer with orjson — a Python client on this same machine;
- creating 100 consumer instances one after another, idle and under the batched produce load: p50 / p99.
Reference printed in the same run: the same work through the Python client in this process (the
gateway's own path without HTTP): send_batch of 500-record batches, and Consumer.poll — so each
gateway figure is also a ratio to what the cluster gives a native client here.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path

import orjson

from tidelog.client import AdminClient, Consumer, Producer, TopicPartition
from tidelog.dev.local_cluster import LocalCluster

VALUE = "x" * 100
RECORDS_PER_POST = 500
PARTITIONS = 6
SINGLE_RATE = 1000


class HttpConnection:
    """One keep-alive HTTP/1.1 connection: request bytes in, (status, body) out."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, url: str) -> HttpConnection:
        host, port = url.removeprefix("http://").split(":")
        return cls(*await asyncio.open_connection(host, int(port)))

    async def request(self, method: str, path: str, body: bytes = b"", content_type: str = "") -> tuple[int, bytes]:
        self.send(method, path, body, content_type)
        return await self.receive()

    def send(self, method: str, path: str, body: bytes = b"", content_type: str = "") -> None:
        """Write a request; its answer comes, in order, from `receive` (HTTP/1.1 pipelining)."""
        head = f"{method} {path} HTTP/1.1\r\nHost: gateway\r\nContent-Length: {len(body)}\r\n"
        if content_type:
            head += f"Content-Type: {content_type}\r\n"
        self.writer.write(head.encode() + b"\r\n" + body)

    async def receive(self) -> tuple[int, bytes]:
        status_line = await self.reader.readline()
        length = 0
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.partition(b":")
            if name.lower() == b"content-length":
                length = int(value)
        return int(status_line.split()[1]), await self.reader.readexactly(length)

    def close(self) -> None:
        self.writer.close()


async def batched_produce(url: str, topic: str, seconds: float, connections: int) -> float:
    body = json.dumps({"records": [{"value": VALUE}] * RECORDS_PER_POST}).encode()
    done = 0
    deadline = time.perf_counter() + seconds

    async def worker() -> None:
        nonlocal done
        connection = await HttpConnection.open(url)
        try:
            while time.perf_counter() < deadline:
                status, answer = await connection.request(
                    "POST", f"/topics/{topic}", body, "application/vnd.kafka.json.v2+json"
                )
                assert status == 200 and b'"error_code":1' not in answer and b'"error_code":2' not in answer, answer[
                    :200
                ]
                done += RECORDS_PER_POST
        finally:
            connection.close()

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(connections)))
    return done / (time.perf_counter() - started)


async def single_record_latency(url: str, topic: str, seconds: float) -> list[float]:
    body = json.dumps({"records": [{"value": VALUE}]}).encode()
    pool: asyncio.Queue[HttpConnection] = asyncio.Queue()
    for _ in range(32):
        pool.put_nowait(await HttpConnection.open(url))
    latencies: list[float] = []

    async def one(scheduled: float) -> None:
        connection = await pool.get()
        status, _ = await connection.request("POST", f"/topics/{topic}", body, "application/vnd.kafka.json.v2+json")
        latencies.append(time.perf_counter() - scheduled)  # from when it was due: no coordinated omission
        assert status == 200
        pool.put_nowait(connection)

    tasks = []
    started = time.perf_counter()
    for n in range(int(seconds * SINGLE_RATE)):
        due = started + n / SINGLE_RATE
        await asyncio.sleep(max(due - time.perf_counter(), 0))
        tasks.append(asyncio.create_task(one(due)))
    await asyncio.gather(*tasks)
    while not pool.empty():
        pool.get_nowait().close()
    return latencies


async def rest_consume(url: str, topic: str, total: int, *, parse_every: int) -> float:
    """Records/s polled back through one binary consumer instance. The generator counts each
    answer's records (C: bytes.count) and parses one answer in `parse_every` in full to check the
    count and the JSON; its parse costs about as much CPU as the gateway's answer (1.8 µs a record
    with orjson), which on this 2-core machine it would take from the gateway, as a client on
    another machine would not: parse_every=1 prints what a Python client here gets."""
    connection = await HttpConnection.open(url)
    v2 = "application/vnd.kafka.v2+json"
    group = f"bench-{time.monotonic_ns()}"
    status, _ = await connection.request("POST", f"/consumers/{group}", b'{"name": "c", "format": "binary"}', v2)
    assert status == 200
    base = f"/consumers/{group}/instances/c"
    partitions = json.dumps({"partitions": [{"topic": topic, "partition": p} for p in range(PARTITIONS)]}).encode()
    assert (await connection.request("POST", f"{base}/assignments", partitions, v2))[0] == 204
    assert (await connection.request("POST", f"{base}/positions/beginning", partitions, v2))[0] == 204
    count = 0
    started = time.perf_counter()
    # The next GET is sent before this one's answer is parsed, as the native consumer fetches
    # ahead while its caller works: the generator's parse of a 12 MB answer (as long as the
    # gateway's work for it) runs beside the gateway's next answer, not between them.
    connection.send("GET", f"{base}/records?timeout=1000")
    answers = 0
    while count < total:
        status, answer = await connection.receive()
        connection.send("GET", f"{base}/records?timeout=1000")
        assert status == 200, answer[:200]
        counted = answer.count(b'"offset":')  # one per record: base64 has no quotes, and no headers here
        if answers % parse_every == 0:
            assert len(orjson.loads(answer)) == counted
        count += counted
        answers += 1
    elapsed = time.perf_counter() - started
    await connection.receive()  # the GET sent ahead (empty, after its timeout, when all was read)
    await connection.request("DELETE", base)
    connection.close()
    return count / elapsed


async def consumer_creation(url: str, count: int, group: str) -> list[float]:
    """Seconds to create each of `count` consumer instances (REST Proxy users find this slow)."""
    connection = await HttpConnection.open(url)
    v2 = "application/vnd.kafka.v2+json"
    times = []
    for n in range(count):
        started = time.perf_counter()
        status, _ = await connection.request("POST", f"/consumers/{group}", b'{"name": "c%d"}' % n, v2)
        times.append(time.perf_counter() - started)
        assert status == 200
    for n in range(count):
        await connection.request("DELETE", f"/consumers/{group}/instances/c{n}")
    connection.close()
    return times


async def consumer_creation_under_load(url: str, topic: str, count: int, connections: int) -> list[float]:
    """The same while batched produce keeps the gateway busy (REST Proxy's complaint is "under load")."""
    loading = asyncio.create_task(batched_produce(url, topic, 3600, connections))
    try:
        await asyncio.sleep(1)
        return await consumer_creation(url, count, "creation-loaded")
    finally:
        loading.cancel()


async def reference_produce(cluster: LocalCluster, topic: str, seconds: float, concurrency: int) -> float:
    values = [VALUE.encode()] * RECORDS_PER_POST
    done = 0
    async with Producer(cluster.bootstrap, linger_ms=2) as producer:
        deadline = time.perf_counter() + seconds

        async def worker() -> None:
            nonlocal done
            while time.perf_counter() < deadline:
                await (await producer.send_batch(topic, values))
                done += RECORDS_PER_POST

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return done / (time.perf_counter() - started)


async def reference_consume(cluster: LocalCluster, topic: str, total: int) -> float:
    async with Consumer(cluster.bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        count = 0
        started = time.perf_counter()
        while count < total:
            count += len(await consumer.poll(1000))
        return count / (time.perf_counter() - started)


def _ms(values: list[float], quantile: float) -> float:
    return sorted(values)[min(int(len(values) * quantile), len(values) - 1)] * 1000


async def run(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="tidelog-bench-gateway-") as folder:
        cluster = LocalCluster(Path(folder), coordinators=2, gateways=1)
        cluster.start()
        try:
            await cluster.wait_ready()
            url = cluster.gateway_urls[0]
            async with AdminClient(cluster.bootstrap, controllers=cluster.controller_endpoints) as admin:
                await admin.create_topic("rest", PARTITIONS, 1)
                await admin.create_topic("native", PARTITIONS, 1)
            reference = await reference_produce(cluster, "native", args.seconds, args.connections)
            batched = await batched_produce(url, "rest", args.seconds, args.connections)
            latencies = await single_record_latency(url, "rest", args.seconds)
            stored = sum(
                (
                    await Consumer(cluster.bootstrap).list_offsets(
                        [TopicPartition("rest", p) for p in range(PARTITIONS)], -1
                    )
                ).values()
            )
            native_stored = min(stored, 1_000_000)
            reference_read = await reference_consume(cluster, "rest", native_stored)
            rest_read = await rest_consume(url, "rest", native_stored, parse_every=16)
            rest_read_parsed = await rest_consume(url, "rest", native_stored, parse_every=1)
            creations = await consumer_creation(url, 100, "creation")
            loaded_creations = await consumer_creation_under_load(url, "rest", 100, args.connections)
        finally:
            cluster.stop()
    print(f"REST gateway, 3 brokers, RF 1, acks=all idempotent, {PARTITIONS} partitions, 100-byte values")
    print(f"  reference: Python client send_batch of {RECORDS_PER_POST}  {reference:12,.0f} records/s")
    print(
        f"  batched JSON produce, {RECORDS_PER_POST}/POST, {args.connections} in flight {batched:12,.0f} records/s"
        f"   ratio {batched / reference:.2f}   (target >= 100,000)"
    )
    print(
        f"  single-record produce at {SINGLE_RATE}/s: p50 {_ms(latencies, 0.5):6.2f} ms  "
        f"p99 {_ms(latencies, 0.99):6.2f} ms  max {max(latencies) * 1000:6.1f} ms   (target p99 <= 20 ms)"
    )
    print(f"  reference: Python client Consumer.poll         {reference_read:12,.0f} records/s")
    print(
        f"  consume by polling /records (binary)           {rest_read:12,.0f} records/s"
        f"   ratio {rest_read / reference_read:.2f}   ({native_stored:,} records; the generator counts,"
        " parses 1 answer in 16)"
    )
    print(
        f"  the same, the generator parsing every answer   {rest_read_parsed:12,.0f} records/s"
        f"   ratio {rest_read_parsed / reference_read:.2f}   (orjson, on the same 2 cores)"
    )
    for label, times in (("idle", creations), ("under batched produce", loaded_creations)):
        print(
            f"  create a consumer instance (x100), {label}: "
            f"p50 {_ms(times, 0.5):6.2f} ms  p99 {_ms(times, 0.99):6.2f} ms"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--connections", type=int, default=8)
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
