"""Issue 32: the community's Kafka dashboards work unchanged. Strimzi's `strimzi-kafka.json` and
`strimzi-kafka-exporter.json` (tests/monitoring/strimzi/, Apache-2.0, from
strimzi/strimzi-kafka-operator examples/metrics/grafana-dashboards) are loaded as Grafana loads
them: their template variables resolved against a real Prometheus scraping a dev cluster under
steady produce with two consumer groups (tests/monitoring/grafana_variables.py), then every panel's
queries run. Every panel returns data except those listed in NO_DATA_HERE with the reason. And, for
the dashboards built for kafka_exporter itself, which pin one `instance`: every series of
kafka_exporter's family comes from one scrape target."""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path

import pytest

from tests.cluster.conftest import wait_until
from tests.monitoring.grafana_variables import panels, resolve
from tidelog.client import AdminClient, GroupConsumer, Producer
from tidelog.common.errors import TidelogError
from tidelog.dev.local_cluster import LocalCluster
from tidelog.dev.local_prometheus import LocalPrometheus
from tidelog.server_common.metrics_catalog import KAFKA_EXPORTER, METRICS

pytestmark = pytest.mark.skipif(
    LocalPrometheus.binary() is None, reason="prometheus not found (Debian package; scripts/install-system-deps)"
)

DASHBOARDS = Path(__file__).parent / "strimzi"
JVM = "the JVM's figures: a Python process has none (our dashboards show the Python runtime's instead)"
KUBELET = "cAdvisor/kubelet figures: Kubernetes only"
NO_DATA_HERE = {
    ("strimzi-kafka.json", "Memory Usage"): KUBELET,
    ("strimzi-kafka.json", "CPU Usage"): KUBELET,
    ("strimzi-kafka.json", "Available Disk Space"): KUBELET,
    ("strimzi-kafka.json", "JVM Memory Used"): JVM,
    ("strimzi-kafka.json", "JVM GC Time"): JVM,
    ("strimzi-kafka.json", "JVM GC Count"): JVM,
    ("strimzi-kafka.json", "JVM Thread Count"): JVM,
}


async def _steady_load(cluster: LocalCluster, stop: asyncio.Event) -> None:
    """A producer on two topics, and two groups reading and committing (one of them stops halfway,
    so it lags)."""
    async with AdminClient(cluster.bootstrap, controllers=cluster.controller_endpoints) as admin:
        await admin.create_topic("orders", 3, 3, {"min.insync.replicas": "2"})
        await admin.create_topic("payments", 2, 2)
    readers = [
        GroupConsumer(cluster.bootstrap, group, auto_offset_reset="earliest", enable_auto_commit=False)
        for group in ("billing", "shipping")
    ]
    readers[0].subscribe(["orders", "payments"])
    readers[1].subscribe(["orders"])

    async def read(reader: GroupConsumer, limit: int | None) -> None:
        count = 0
        while not stop.is_set() and (limit is None or count < limit):
            with contextlib.suppress(TidelogError):
                count += len(await reader.poll(200))
                await reader.commit()

    async with Producer(cluster.bootstrap, acks="all", linger_ms=5) as producer:
        reading = [asyncio.create_task(read(readers[0], None)), asyncio.create_task(read(readers[1], 300))]
        while not stop.is_set():
            for partition in range(3):
                await producer.send_batch("orders", [b"o" * 50] * 20, partition=partition)
            await producer.send_batch("payments", [b"p" * 80] * 10)
            await asyncio.sleep(0.1)
        await asyncio.gather(*reading)
    for reader in readers:
        await reader.close()


async def test_strimzis_dashboards_show_data_in_every_panel_but_the_jvms_and_kubelets(
    monitored: tuple[LocalCluster, LocalPrometheus],
) -> None:
    cluster, prometheus = monitored
    stop = asyncio.Event()
    load = asyncio.create_task(_steady_load(cluster, stop))
    try:

        async def rates_measurable() -> bool:  # irate over [5m] needs two samples of the traffic
            found = await asyncio.to_thread(
                prometheus.query,
                'count_over_time(kafka_server_brokertopicmetrics_messagesin_total{topic="orders"}[5m]) >= 3',
            )
            groups = await asyncio.to_thread(prometheus.query, "kafka_consumergroup_lag")
            return bool(found) and len({series["metric"]["consumergroup"] for series in groups}) == 2

        await wait_until(rates_measurable, timeout_s=60, what="traffic scraped three times, both groups' lag")
        results: dict[tuple[str, str], bool] = {}
        for path in sorted(DASHBOARDS.glob("*.json")):
            dashboard = json.loads(path.read_text())
            variables = await asyncio.to_thread(resolve, prometheus, dashboard)
            assert variables.values["kubernetes_namespace"] == "local", variables.values
            assert variables.values["strimzi_cluster_name"] == "tidelog", variables.values
            for panel in panels(path.name, dashboard):
                has_data = False
                for expression in panel.expressions:
                    concrete = variables.interpolate(expression, rate_interval="4s")
                    has_data |= bool(await asyncio.to_thread(prometheus.query, concrete))
                results[(path.name, panel.title)] = has_data
        # Dashboards built for kafka_exporter pin instance="$instance" taken from
        # label_values(kafka_consumergroup_current_offset, instance): every kafka_exporter series
        # must come from that one target (the active controller), and only from it.
        instances = await asyncio.to_thread(
            prometheus.api, "label/instance/values", **{"match[]": "kafka_consumergroup_current_offset"}
        )
        assert len(instances) == 1, instances
        for metric in METRICS:
            if metric.kafka == KAFKA_EXPORTER:
                found = await asyncio.to_thread(prometheus.query, f"count by (instance) ({metric.name})")
                assert [series["metric"]["instance"] for series in found] == instances, (metric.name, found)
    finally:
        stop.set()
        await load
    assert set(NO_DATA_HERE) <= set(results), "every listed panel is on a dashboard"
    counted = {key: has for key, has in results.items() if key not in NO_DATA_HERE}
    empty = sorted(f"{name}: {title}" for (name, title), has in counted.items() if not has)
    with_data = len(counted) - len(empty)
    print(f"\nStrimzi dashboards: {with_data} of {len(counted)} panels with data ({len(NO_DATA_HERE)} left out)")
    assert len(counted) >= 39  # 30 + 16 panels less the 7 listed: the dashboards were read whole
    assert not empty, "panels without data:\n" + "\n".join(empty)
