"""Security benchmark: batched produce and consume with TLS and authorisation on, beside plaintext,
in the same run (issue 17's target: at most 20% lower).

    .venv/bin/python bench/bench_security.py [--records 500000] [--partitions 6] [--rounds 2]

Three local clusters of real processes (etcd, 1 controller, 3 brokers), one after the other, each
producing `--records` 100-byte records with `send_batch` (acks=1) and consuming them with
`poll_batches`:
- PLAINTEXT, no authoriser: the reference;
- SSL with mutual TLS (certificates made with trustme) and the ACL authoriser, the client a
  principal with Write/Read ACLs on the topic (not a super user: every request is checked);
- SASL_SSL: the same over TLS with SCRAM-SHA-512 logins.
Each figure is the best of `--rounds` runs; the ratio to plaintext is what the target is about.

Then, on the plaintext cluster, client quotas: a producer and a consumer each running as fast as
they can for 10 s under a byte-rate quota (`--quota-bytes`), the rate measured against the quota
(target: within ±15%).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import trustme

from tidelog.client import AclBinding, AdminClient, Consumer, Producer, TopicPartition
from tidelog.common.security.quotas.quota import QuotaEntity
from tidelog.common.settings import SecuritySettings
from tidelog.dev.local_cluster import LocalCluster

VALUE_BYTES = 100
TOPIC = "bench-security"
ROLES = {
    "authorizer.class.name": "AclAuthorizer",
    "super.users": "User:admin",
    "controller.principals": "User:controller-1",
    "broker.principals": "User:broker-1;User:broker-2;User:broker-3",
}


class Pki:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.ca = trustme.CA()
        self.ca_file = folder / "ca.pem"
        self.ca.cert_pem.write_to_path(str(self.ca_file))

    def issue(self, name: str) -> tuple[str, str]:
        issued = self.ca.issue_cert("127.0.0.1", "localhost", common_name=name)
        certificate, key = self.folder / f"{name}.crt", self.folder / f"{name}.key"
        certificate.write_bytes(b"".join(blob.bytes() for blob in issued.cert_chain_pems))
        issued.private_key_pem.write_to_path(str(key))
        return str(certificate), str(key)

    def mutual(self, name: str) -> dict[str, str]:
        certificate, key = self.issue(name)
        return {
            "security.protocol": "SSL",
            "ssl.certificate.location": certificate,
            "ssl.key.location": key,
            "ssl.ca.location": str(self.ca_file),
            "ssl.client.auth": "required",
            "ssl.principal.mapping.rules": "RULE:^CN=([^,]+).*$/$1/",
        }

    def sasl(self, name: str) -> dict[str, str]:
        certificate, key = self.issue(name)
        return {
            "security.protocol": "SASL_SSL",
            "ssl.certificate.location": certificate,
            "ssl.key.location": key,
            "ssl.ca.location": str(self.ca_file),
            "sasl.username": name,
            "sasl.password": f"{name}-password",
        }


async def produce_bulk(cluster: LocalCluster, values: list[bytes], security: SecuritySettings | None) -> float:
    async with Producer(
        cluster.bootstrap, acks=1, batch_size=1024 * 1024, max_request_size=8 * 1024 * 1024, security=security
    ) as producer:
        started = time.perf_counter()
        chunk = 50_000
        deliveries = [
            await producer.send_batch(TOPIC, values[start : start + chunk]) for start in range(0, len(values), chunk)
        ]
        for delivery in deliveries:
            await delivery
        return len(values) / (time.perf_counter() - started)


async def consume_all(
    cluster: LocalCluster, partitions: int, expected: int, security: SecuritySettings | None
) -> float:
    async with Consumer(
        cluster.bootstrap, auto_offset_reset="earliest", max_partition_fetch_bytes=4 * 1024 * 1024, security=security
    ) as consumer:
        consumer.assign([TopicPartition(TOPIC, partition) for partition in range(partitions)])
        await consumer.seek_to_beginning()
        consumed = 0
        started = time.perf_counter()
        while consumed < expected:
            for fetched in (await consumer.poll_batches(2000)).values():
                for batch in fetched.batches:
                    consumed += sum(1 for offset in batch.offsets if offset >= fetched.start_offset)
        return consumed / (time.perf_counter() - started)


QUOTA_SECONDS = 10.0
QUOTA_RESULTS: dict[str, float] = {}


async def measure_quotas(cluster: LocalCluster, quota: int) -> dict[str, float]:
    """Bytes/s a producer and a consumer reach under `quota` bytes/s each, over QUOTA_SECONDS."""
    record = b"q" * 1000
    async with AdminClient(cluster.bootstrap, controllers=cluster.controller_endpoints) as admin:
        await admin.create_topic("bench-quota", 1, 1)
        await admin.alter_client_quotas(QuotaEntity(client_id="bench-producer"), {"producer_byte_rate": quota})
        await admin.alter_client_quotas(QuotaEntity(client_id="bench-consumer"), {"consumer_byte_rate": quota})
    await asyncio.sleep(1)  # the quotas reach every broker
    produced = 0
    async with Producer(cluster.bootstrap, acks=1, client_id="bench-producer") as producer:
        deadline = time.monotonic() + QUOTA_SECONDS
        while time.monotonic() < deadline:
            await (await producer.send_batch("bench-quota", [record] * 16, partition=0))
            produced += 16 * len(record)
    async with Producer(cluster.bootstrap, acks=1) as producer:  # unthrottled: enough to read for 10 s
        for _ in range(int(quota * QUOTA_SECONDS * 2 / len(record) / 1000) + 1):
            await (await producer.send_batch("bench-quota", [record] * 1000, partition=0))
    consumed = 0
    async with Consumer(
        cluster.bootstrap, client_id="bench-consumer", auto_offset_reset="earliest", max_partition_fetch_bytes=65536
    ) as consumer:
        consumer.assign([TopicPartition("bench-quota", 0)])
        await consumer.seek_to_beginning()
        deadline = time.monotonic() + QUOTA_SECONDS
        while time.monotonic() < deadline:
            consumed += sum(len(r.value or b"") for r in await consumer.poll(100))
    return {"produce": produced / QUOTA_SECONDS, "consume": consumed / QUOTA_SECONDS}


async def run(
    folder: Path,
    values: list[bytes],
    partitions: int,
    rounds: int,
    *,
    service: Callable[[str], dict[str, str]] | None = None,
    client: Callable[[str], dict[str, str]] | None = None,
    users: dict[str, str] | None = None,
    quota_bytes: int = 0,
) -> tuple[float, float]:
    admin_security = SecuritySettings.from_configs(client("admin")) if client else None
    app_security = SecuritySettings.from_configs(client("app")) if client else None
    cluster = LocalCluster(
        folder,
        brokers=3,
        controllers=1,
        service_security=service,
        client_security=admin_security,
        scram_users=users,
    )
    cluster.start()
    try:
        await cluster.wait_ready()
        async with AdminClient(
            cluster.bootstrap, controllers=cluster.controller_endpoints, security=admin_security
        ) as admin:
            await admin.create_topic(TOPIC, partitions, 1)
            if client is not None:
                await admin.create_acls(
                    [
                        AclBinding.of(
                            principal="User:app", operation=operation, resource_type="Topic", resource_name=TOPIC
                        )
                        for operation in ("Write", "Read")
                    ]
                )
                await asyncio.sleep(1)  # the ACL reaches every broker (watch)
        produced = max([await produce_bulk(cluster, values, app_security) for _ in range(rounds)])
        consumed = max(
            [await consume_all(cluster, partitions, len(values) * rounds, app_security) for _ in range(rounds)]
        )
        if quota_bytes:
            QUOTA_RESULTS.update(await measure_quotas(cluster, quota_bytes))
        return produced, consumed
    finally:
        cluster.stop()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--quota-bytes", type=int, default=1_000_000, help="bytes/s of the quota measured")
    args = parser.parse_args()
    values = [os.urandom(VALUE_BYTES) for _ in range(args.records)]
    with tempfile.TemporaryDirectory() as temporary:
        workdir = Path(temporary)
        pki = Pki(workdir)
        results = {
            "PLAINTEXT": await run(
                workdir / "plain", values, args.partitions, args.rounds, quota_bytes=args.quota_bytes
            ),
            "SSL, mutual TLS + ACLs": await run(
                workdir / "ssl",
                values,
                args.partitions,
                args.rounds,
                service=lambda name: {**pki.mutual(name), **ROLES},
                client=pki.mutual,
            ),
            "SASL_SSL (SCRAM-SHA-512) + ACLs": await run(
                workdir / "sasl",
                values,
                args.partitions,
                args.rounds,
                service=lambda name: {**pki.sasl(name), **ROLES},
                client=pki.sasl,
                users={
                    name: f"{name}-password"
                    for name in ("controller-1", "broker-1", "broker-2", "broker-3", "admin", "app")
                },
            ),
        }
    plain_produce, plain_consume = results["PLAINTEXT"]
    print(
        f"{args.records:,} records of {VALUE_BYTES} bytes, {args.partitions} partitions on 3 brokers, acks=1, "
        f"best of {args.rounds}"
    )
    for name, (produced, consumed) in results.items():
        print(
            f"  {name:34s} produce {produced:10,.0f} records/s ({produced / plain_produce:6.1%})   "
            f"consume {consumed:10,.0f} records/s ({consumed / plain_consume:6.1%})"
        )
    print("  target: secured >= 80% of plaintext for batched produce and consume")
    for name, rate in QUOTA_RESULTS.items():
        print(
            f"  quota {args.quota_bytes:,} B/s, {name} at full speed for {QUOTA_SECONDS:.0f} s: {rate:12,.0f} B/s "
            f"({rate / args.quota_bytes:.2f}x; target 0.85-1.15)"
        )


if __name__ == "__main__":
    asyncio.run(main())
