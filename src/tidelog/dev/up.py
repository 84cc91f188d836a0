"""`tidelog dev up`: the whole platform on this machine, as real processes, on a data folder.

Starts etcd, the controllers, the brokers, the group coordinators and the REST gateway
(tidelog.dev.local_cluster) on the ports Kafka's and REST Proxy's docs use where they are free
(first broker's Kafka listener 9092, its gRPC listener 9292, gateway 8082), Prometheus (9090)
scraping every process with the alert rules loaded when `prometheus` is installed, and Grafana
(3000) with the dashboards when a Grafana server is; waits until a controller is active and every
broker is registered, prints the endpoints, and runs until Ctrl-C or SIGTERM, then stops every
process cleanly. Run it again on the same folder: same endpoints, same data. Every `tidelog` command
of this user finds the running cluster from any folder (the state file
`tidelog.common.local_endpoints.user_state_file()`).
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from pathlib import Path
from typing import Final

from tidelog.cli.output import table
from tidelog.client import AdminClient
from tidelog.common.local_endpoints import CLIENT_PROPERTIES
from tidelog.dev.etcd_server import port_or_free
from tidelog.dev.local_cluster import LocalCluster
from tidelog.dev.local_grafana import LocalGrafana
from tidelog.dev.local_prometheus import LocalPrometheus, scrape_config
from tidelog.dev.local_security import APP_USER, SUPER_USER, LocalSecurity

__all__ = ["up"]

PROMETHEUS_PORT: Final = 9090  # Prometheus's own default
GRAFANA_PORT: Final = 3000  # Grafana's


def _monitoring(cluster: LocalCluster) -> tuple[list[list[str]], list[LocalPrometheus | LocalGrafana]]:
    """Prometheus and Grafana where installed: their rows for the table, and the processes."""
    rows: list[list[str]] = []
    started: list[LocalPrometheus | LocalGrafana] = []
    if LocalPrometheus.binary() is None:
        print("prometheus not found (Debian package `prometheus`): running without it", flush=True)
        return rows, started
    prometheus = LocalPrometheus(scrape_config(cluster), cluster.data_dir / "prometheus", port_or_free(PROMETHEUS_PORT))
    prometheus.start()
    prometheus.wait_ready()
    started.append(prometheus)
    # Prometheus 2.x (Debian's 2.42) serves its alerts page at /classic/alerts beside the new UI's
    # /alerts, which 2.42 answers 404 without the React assets Debian leaves out.
    rows.append(["prometheus", prometheus.url, f"{prometheus.url}/classic/alerts"])
    if LocalGrafana.binary() is None:
        print("no Grafana server on this machine: dashboards are in helm/tidelog/files/dashboards", flush=True)
        return rows, started
    grafana = LocalGrafana(cluster.data_dir / "grafana", port_or_free(GRAFANA_PORT), prometheus.url)
    grafana.start()
    started.append(grafana)
    rows.append(["grafana", grafana.url, "dashboards in folder Tidelog"])
    return rows, started


async def _run(cluster: LocalCluster, security: LocalSecurity | None) -> None:
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signal_number in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signal_number, stopping.set)
    cluster.start()
    monitoring: list[LocalPrometheus | LocalGrafana] = []
    try:
        await cluster.wait_ready()
        if security is not None:
            async with AdminClient(
                cluster.bootstrap, controllers=cluster.controller_endpoints, security=security.client_security
            ) as admin:
                await admin.create_acls(security.app_acls())
        monitoring_rows, monitoring = await asyncio.to_thread(_monitoring, cluster)
        rows = [["etcd", cluster.etcd.endpoint, ""]]
        rows += [
            [f"controller-{i}", endpoint, cluster.metrics_endpoint(f"controller-{i}")]
            for i, endpoint in zip(cluster.controller_ids, cluster.controller_endpoints, strict=True)
        ]
        rows += [
            [f"broker-{i}", endpoint, cluster.metrics_endpoint(f"broker-{i}")]
            for i, endpoint in zip(cluster.broker_ids, cluster.bootstrap, strict=True)
        ]
        if cluster.kafka_listeners:  # (Kafka's own clients and tools: docs/kafka-protocol.md)
            rows += [
                [f"broker-{i} (Kafka protocol)", endpoint, ""]
                for i, endpoint in zip(cluster.broker_ids, cluster.kafka_bootstrap.split(","), strict=True)
            ]
        rows += [
            [f"coordinator-{i}", endpoint, cluster.metrics_endpoint(f"coordinator-{i}")]
            for i, endpoint in zip(cluster.coordinator_ids, cluster.coordinator_endpoints, strict=True)
        ]
        rows += [
            [f"gateway-{i}", url, cluster.metrics_endpoint(f"gateway-{i}")]
            for i, url in zip(cluster.gateway_ids, cluster.gateway_urls, strict=True)
        ]
        rows += monitoring_rows
        print(table(["process", "endpoint", "metrics"], rows))
        if security is not None:
            _print_secure(cluster, security)
        print(
            f"\ndata and logs under {cluster.data_dir}; try:\n"
            f"  tidelog topic create demo --partitions 6\n"
            f"  seq 1 1000 | tidelog produce demo\n"
            f"  tidelog consume demo --from-beginning --max-messages 10\n"
            + "".join(
                f"  curl {_curl_security(security)}{url}/topics/demo   # the REST gateway\n"
                for url in cluster.gateway_urls[:1]
            )
            + (
                f"  kcat -b {cluster.kafka_bootstrap.split(',')[0]} -L   # any Kafka client or tool\n"
                if cluster.kafka_listeners
                else ""
            )
            + "Ctrl-C stops everything.",
            flush=True,
        )
        while not stopping.is_set():
            cluster.check_alive()
            try:
                await asyncio.wait_for(stopping.wait(), timeout=1.0)
            except TimeoutError:
                continue
    finally:
        print("stopping ...", flush=True)
        for process in monitoring:
            process.stop()
        cluster.stop()
        print("stopped.")


def _curl_security(security: LocalSecurity | None) -> str:
    if security is None:
        return ""
    return f"--cacert {security.ca_file} -u {APP_USER}:{security.passwords[APP_USER]} "


def _print_secure(cluster: LocalCluster, security: LocalSecurity) -> None:
    print(
        f"\nsecure: SASL_SSL on every listener (SCRAM-SHA-512), etcd on mutual TLS, the gateway on HTTPS with "
        f"HTTP Basic, ACLs enforced.\n"
        f"  users: {SUPER_USER} (super user) password {security.passwords[SUPER_USER]}; {APP_USER} (ACLs: every "
        f"topic and group; REST logins) password {security.passwords[APP_USER]}\n"
        f"  client settings: {cluster.data_dir / CLIENT_PROPERTIES} (tidelog commands use it here by themselves;\n"
        f"  other clients: --command-config / their security.protocol, ssl.ca.location, sasl.* settings)\n"
        f"  CA certificate:  {security.ca_file}\n"
        f"  create a user:   TIDELOG_USER_PASSWORD=... tidelog user create alice; then "
        "`tidelog acl add --allow-principal User:alice ...`",
        flush=True,
    )


def _process_names(args: argparse.Namespace) -> list[str]:
    counts = (("controller", args.controllers), ("broker", args.brokers), ("coordinator", args.coordinators))
    return [f"{role}-{i}" for role, count in (*counts, ("gateway", args.gateways)) for i in range(1, count + 1)]


def up(args: argparse.Namespace) -> int:
    """`tidelog dev up` with its parsed arguments (tidelog.cli.dev declares them)."""
    data_dir = Path(args.data_dir or "data")
    security = LocalSecurity(data_dir, _process_names(args)) if args.secure else None
    if security is not None:
        security.write_client_properties()
    else:
        (data_dir / CLIENT_PROPERTIES).unlink(missing_ok=True)  # a secure run's settings no longer apply
    cluster = LocalCluster(
        data_dir,
        brokers=args.brokers,
        controllers=args.controllers,
        coordinators=args.coordinators,
        # As Kafka's own config/server.properties sets it "for development and testing": the first
        # consumer of a group is assigned at once, not after the 3 s a starting fleet would need.
        coordinator_args=["--group-initial-rebalance-delay-ms", "0"],
        gateways=args.gateways,
        metrics=True,
        conventional_ports=True,
        announce=True,
        service_security=None if security is None else security.service_settings,
        client_security=None if security is None else security.client_security,
        scram_users=None if security is None else security.passwords,
        etcd_tls=None if security is None else security.etcd_tls,
        etcd_client_security=None if security is None else security.etcd_client_security,
        gateway_tls=security is not None,
    )
    asyncio.run(_run(cluster, security))
    return 0
