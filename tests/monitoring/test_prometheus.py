"""A real Prometheus scraping a real local cluster under load, with Tidelog's alert rules: every
target is up, every rule's expression evaluates, and killing a broker fires the broker-down and
under-replicated alerts within their `for`, which resolve once it is back."""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
import signal
import subprocess
from pathlib import Path

import httpx
import pytest
import yaml

from tests.cluster.conftest import poll_until, wait_until
from tests.monitoring.grafana_variables import resolve
from tidelog.client import AdminClient, GroupConsumer, Producer, TopicPartition
from tidelog.common.errors import TidelogError
from tidelog.dev.dashboards import queries, render_all
from tidelog.dev.local_cluster import LocalCluster
from tidelog.dev.local_prometheus import ALERT_RULES, LocalPrometheus, scrape_config
from tidelog.server_common.metrics_catalog import METRICS, Exporter, Kind

pytestmark = pytest.mark.skipif(
    LocalPrometheus.binary() is None, reason="prometheus not found (Debian package; scripts/install-system-deps)"
)
SCRAPE_S = 1.0


async def _rest_load(cluster: LocalCluster) -> None:
    """A REST producer and a REST consumer through the gateway, as the gateway dashboard shows them."""
    async with httpx.AsyncClient(base_url=cluster.gateway_urls[0], timeout=30) as rest:
        produced = await rest.post(
            "/topics/events",
            json={"records": [{"value": base64.b64encode(b"rest %d" % n).decode(), "partition": 1} for n in range(20)]},
            headers={"content-type": "application/vnd.kafka.binary.v2+json"},
        )
        assert produced.status_code == 200, produced.text
        v2 = {"content-type": "application/vnd.kafka.v2+json"}
        created = await rest.post(
            "/consumers/rest-readers",
            json={"name": "r1", "format": "binary", "auto.offset.reset": "earliest"},
            headers=v2,
        )
        assert created.status_code == 200, created.text
        base = "/consumers/rest-readers/instances/r1"
        assert (await rest.post(f"{base}/subscription", json={"topics": ["events"]}, headers=v2)).status_code == 204
        fetched = await rest.get(
            f"{base}/records", params={"timeout": 2000}, headers={"accept": "application/vnd.kafka.binary.v2+json"}
        )
        assert fetched.status_code == 200, fetched.text


async def _load(cluster: LocalCluster) -> GroupConsumer:
    """Records in a replicated topic, a group that has read part of them (so it lags), and REST
    traffic through the gateway."""
    async with AdminClient(cluster.bootstrap, controllers=cluster.controller_endpoints) as admin:
        await admin.create_topic("events", 3, 3)
    async with Producer(cluster.bootstrap, acks="all") as producer:
        for partition in range(3):
            await (await producer.send_batch("events", [b"e%d" % n for n in range(100)], partition=partition))
    member = GroupConsumer(cluster.bootstrap, "billing", auto_offset_reset="earliest", enable_auto_commit=False)
    member.subscribe(["events"])
    await poll_until(member, 10, what="the group reading")
    await member.commit({TopicPartition("events", 0): 10})
    await _rest_load(cluster)
    async with AdminClient(cluster.bootstrap, controllers=cluster.controller_endpoints) as admin:
        await admin.create_topic("tiny", 1, 1, configs={"max.message.bytes": "1024"})
    async with Producer(cluster.bootstrap) as producer:  # a refused produce, for the failure figures
        with pytest.raises(TidelogError):
            await (await producer.send("tiny", b"x" * 4096, partition=0))
    return member


def test_the_generated_scrape_config_is_valid(tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not found")
    cluster = LocalCluster(tmp_path / "cluster", coordinators=1, gateways=1, metrics=True)
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(scrape_config(cluster)))
    checked = subprocess.run([promtool, "check", "config", str(path)], capture_output=True, text=True, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    jobs = {job["job_name"]: job for job in yaml.safe_load(path.read_text())["scrape_configs"]}
    assert set(jobs) == {"tidelog-broker", "tidelog-controller", "tidelog-coordinator", "tidelog-gateway", "etcd"}
    assert len(jobs["tidelog-broker"]["static_configs"]) == 3


async def test_rules_evaluate_and_a_killed_broker_raises_its_alerts_until_it_returns(
    monitored: tuple[LocalCluster, LocalPrometheus],
) -> None:
    cluster, prometheus = monitored
    member = await _load(cluster)
    try:
        targets = sum(len(job["static_configs"]) for job in prometheus.config["scrape_configs"])
        assert targets == 3 + 2 + 1 + 1 + 1  # brokers, controllers, coordinator, gateway, etcd

        async def all_up() -> bool:
            up = await asyncio.to_thread(prometheus.query, "up == 1")
            return len(up) == targets

        await wait_until(all_up, timeout_s=30, what="every process scraped")

        async def lag_seen() -> bool:
            found = await asyncio.to_thread(prometheus.query, 'kafka_consumergroup_lag_sum{consumergroup="billing"}')
            return bool(found) and float(found[0]["value"][1]) == 90

        await wait_until(lag_seen, timeout_s=30, what="the group's lag in Prometheus")

        async def rates_measurable() -> bool:  # a rate needs two samples since the traffic began
            found = await asyncio.to_thread(
                prometheus.query,
                'count_over_time(kafka_server_brokertopicmetrics_messagesin_total{topic="events"}[1m]) >= 3',
            )
            return bool(found)

        await wait_until(rates_measurable, timeout_s=30, what="the traffic scraped three times")
        rules = [rule for group in yaml.safe_load(ALERT_RULES.read_text())["groups"] for rule in group["rules"]]
        for rule in rules:  # each evaluates (a bad expression is a ValueError from the API)
            await asyncio.to_thread(prometheus.query, str(rule["expr"]))
        assert not await asyncio.to_thread(prometheus.firing), "a healthy cluster fires nothing"

        # Every catalogued metric of the processes running here is exported, and nothing else is.
        names = await asyncio.to_thread(prometheus.query, 'group by (__name__) ({__name__=~"kafka_.*|tidelog_.*"})')
        exported = {series["metric"]["__name__"] for series in names}
        catalogued = {
            metric.name + ("_count" if metric.kind is Kind.HISTOGRAM else "")
            for metric in METRICS
            if metric.exporter is not Exporter.OPERATOR
        }
        names_catalogued = {metric.name for metric in METRICS}
        exported_bases = {
            name
            if name in names_catalogued
            else name.removesuffix("_bucket").removesuffix("_sum").removesuffix("_count")
            for name in exported
        }  # a gauge may end in _count (connection_count): only a histogram's series are stripped
        assert catalogued - exported == set(), "catalogued but not exported"
        assert exported_bases - {metric.name for metric in METRICS} == set(), "exported but not catalogued"

        # Every query of every dashboard panel returns data, with Grafana's variables resolved as
        # Grafana resolves them on load (grafana_variables.py) and its rate interval for this
        # scrape interval.
        empty = []
        for name, text in render_all().items():
            dashboard = json.loads(text)
            variables = await asyncio.to_thread(resolve, prometheus, dashboard)
            for title, expr in queries(dashboard):
                concrete = variables.interpolate(expr, rate_interval="15s")
                if not await asyncio.to_thread(prometheus.query, concrete):
                    empty.append(f"{name}: {title}: {concrete}")
        assert not empty, "panels without data:\n" + "\n".join(empty)

        victim = "broker-3"
        instance = f"127.0.0.1:{cluster.ports.metrics[victim]}"
        cluster.signal(victim, signal.SIGKILL)
        # Both conditions hold on the real metrics (the alerts are active: pending, then firing
        # once their `for: 1m` runs out). That they fire only after holding for their `for:` and
        # stay silent below threshold is promtool's unit test of the rules (test_alert_rules.py):
        # waiting out the minute here cost the suite a minute for what Prometheus itself does.
        wanted = {("TidelogBrokerDown", instance), ("TidelogUnderReplicatedPartitions", "")}

        async def active() -> bool:
            return wanted <= await asyncio.to_thread(prometheus.alerts)

        await wait_until(active, timeout_s=60, what="broker-down and under-replicated alerts active")
        assert not await asyncio.to_thread(prometheus.firing), "fired before their `for:` ran out"

        cluster.start_broker(3)

        async def resolved() -> bool:
            return not (wanted & await asyncio.to_thread(prometheus.alerts))

        await wait_until(resolved, timeout_s=90, what="the alerts inactive again after the restart")
    finally:
        await member.close()
