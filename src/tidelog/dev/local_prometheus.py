"""A real Prometheus (the `prometheus` binary, Debian's package) scraping a LocalCluster, with
Tidelog's alert rules loaded: for `tidelog dev up`, the monitoring tests and benchmarks, as
`local_cluster` is for the cluster itself.

The scrape config names one job per role (`tidelog-broker`, `tidelog-controller`, ...), which the
alert rules and dashboards select on; a target's `instance` is its metrics address and its
`process` label the LocalCluster process name (`broker-2`). The chart's PodMonitor relabelings
run here too, on the pod metadata the chart would give each process, so the labels Strimzi's
dashboards select on (`namespace`, `kubernetes_pod_name`, `strimzi_io_cluster`, `container`, ...)
are made by the very rules Kubernetes would run.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Final

import yaml

from tidelog.dev import child_process
from tidelog.dev.local_cluster import LocalCluster

__all__ = ["ALERT_RULES", "LocalPrometheus", "scrape_config"]

ALERT_RULES: Final = Path(__file__).resolve().parents[3] / "helm" / "tidelog" / "files" / "alerts.yaml"
POD_RELABELINGS: Final = ALERT_RULES.parent / "pod-relabelings.yaml"
ROLES: Final = ("broker", "controller", "coordinator", "gateway")
# As on Kubernetes with the chart (docs/monitoring.md): Strimzi's dashboards find this cluster as
# namespace "local", cluster (release) "tidelog", pods tidelog-broker-1, ...
NAMESPACE: Final = "local"
RELEASE: Final = "tidelog"
CONTAINERS: Final = {"broker": "kafka"}  # the chart's container names, where not the role's
READY_TIMEOUT_S: Final = 30.0


def scrape_config(
    cluster: LocalCluster, *, interval_s: float = 5.0, rule_files: list[Path] | None = None
) -> dict[str, Any]:
    """prometheus.yml for every process of `cluster` that serves metrics."""
    if not cluster.metrics:
        raise ValueError("the cluster serves no metrics: LocalCluster(..., metrics=True)")
    jobs = []
    for role in ROLES:
        names = [f"{role}-{number}" for number in getattr(cluster, f"{role}_ids")]
        if not names:
            continue
        targets = [
            {"targets": [f"127.0.0.1:{cluster.ports.metrics[name]}"], "labels": {"process": name, **_pod(role, name)}}
            for name in names
        ]
        jobs.append({"job_name": f"tidelog-{role}", "static_configs": targets, "relabel_configs": _pod_relabelings()})
    # etcd serves its own metrics on its client port (the internals dashboard reads them).
    jobs.append({"job_name": "etcd", "static_configs": [{"targets": [f"127.0.0.1:{cluster.ports.etcd_client}"]}]})
    interval = f"{max(int(interval_s * 1000), 100)}ms"
    return {
        "global": {"scrape_interval": interval, "evaluation_interval": interval, "scrape_timeout": interval},
        "rule_files": [str(path) for path in (rule_files if rule_files is not None else [ALERT_RULES])],
        "scrape_configs": jobs,
    }


def _pod(role: str, name: str) -> dict[str, str]:
    """The pod metadata Kubernetes service discovery would give this process in the chart (a
    release named RELEASE in namespace NAMESPACE), as labels the relabelings read and Prometheus
    drops after relabeling (their names start with __)."""
    return {
        "__meta_kubernetes_namespace": NAMESPACE,
        "__meta_kubernetes_pod_name": f"{RELEASE}-{name}",
        "__meta_kubernetes_pod_label_app_kubernetes_io_instance": RELEASE,
        "__meta_kubernetes_pod_label_app_kubernetes_io_name": f"tidelog-{role}",
        "__meta_kubernetes_pod_container_name": CONTAINERS.get(role, role),
        "__meta_kubernetes_pod_node_name": socket.gethostname(),
    }


def _pod_relabelings() -> list[dict[str, Any]]:
    """The chart's PodMonitor relabelings (one file, POD_RELABELINGS), in Prometheus' own syntax,
    after those the Prometheus Operator puts first (namespace, pod, container)."""
    operator = [
        {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
        {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
        {"source_labels": ["__meta_kubernetes_pod_container_name"], "target_label": "container"},
    ]
    keys = {"sourceLabels": "source_labels", "targetLabel": "target_label"}
    chart = [
        {keys.get(key, key): value for key, value in rule.items()}
        for rule in yaml.safe_load(POD_RELABELINGS.read_text())
    ]
    return operator + chart


class LocalPrometheus:
    """`prometheus` on loopback with a config and data directory of its own."""

    def __init__(self, config: dict[str, Any], data_dir: Path, port: int) -> None:
        self.config = config
        self.data_dir = data_dir
        self.port = port
        self.process: subprocess.Popen[bytes] | None = None

    @staticmethod
    def binary() -> str | None:
        return shutil.which("prometheus")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        binary = self.binary()
        if binary is None:
            raise FileNotFoundError("prometheus not found on PATH (Debian package `prometheus`)")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        config_path = self.data_dir / "prometheus.yml"
        config_path.write_text(yaml.safe_dump(self.config, sort_keys=False))
        log = (self.data_dir / "prometheus.log").open("ab")
        self.process = subprocess.Popen(
            [
                binary,
                f"--config.file={config_path}",
                f"--storage.tsdb.path={self.data_dir / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--web.enable-lifecycle",
            ],
            stdout=log,
            stderr=log,
        )
        log.close()

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            assert self.process is not None, "start() first"
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"prometheus exited with {self.process.returncode}: see {self.data_dir}/prometheus.log"
                )
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"prometheus not ready in {timeout_s} s")
            time.sleep(0.1)

    def api(self, path: str, **params: str) -> Any:
        """GET /api/v1/<path>; the `data` of a successful answer, else ValueError with Prometheus's error."""
        query = urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=10) as answer:
                body = json.load(answer)
        except urllib.error.HTTPError as error:
            body = json.load(error)
        if body.get("status") != "success":
            raise ValueError(f"{path} {params}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expression: str) -> list[dict[str, Any]]:
        data = self.api("query", query=expression)
        result: list[dict[str, Any]] = data["result"] if data["resultType"] == "vector" else []
        return result

    def firing(self) -> set[tuple[str, str]]:
        """(alert name, instance or "") of every alert firing now."""
        return self.alerts(("firing",))

    def alerts(self, states: tuple[str, ...] = ("pending", "firing")) -> set[tuple[str, str]]:
        """(alert name, instance or "") of every alert in one of `states`: pending is an alert
        whose condition holds and whose `for:` has not run out yet."""
        alerts = self.api("alerts")["alerts"]
        return {(a["labels"]["alertname"], a["labels"].get("instance", "")) for a in alerts if a["state"] in states}

    def stop(self) -> None:
        child_process.stop(self.process)
        self.process = None
