"""The Helm chart's manifests, as tests/layout renders them, accepted by a real Kubernetes API
server (k3s in a container) in a server-side dry run: field names, types and references checked by
Kubernetes itself rather than by our reading of them."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import yaml
from testcontainers.core.container import DockerContainer

from ..layout.test_helm_chart import CHART, render

K3S_IMAGE = "rancher/k3s:v1.31.4-k3s1"
READY_TIMEOUT_S = 120


@pytest.fixture(scope="module")
def k3s(docker_engine: None) -> Iterator[DockerContainer]:
    container = DockerContainer(K3S_IMAGE).with_command("server --disable=traefik").with_kwargs(privileged=True)
    with container:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while container.exec("kubectl get --raw=/readyz").exit_code != 0:
            assert time.monotonic() < deadline, "k3s did not become ready"
            time.sleep(1)
        yield container


def test_the_chart_is_accepted_by_a_kubernetes_api_server(k3s: DockerContainer) -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    manifests = "\n---\n".join(
        render(template.read_text(), values, chart) for template in sorted((CHART / "templates").glob("*.yaml"))
    )
    quoted = manifests.replace("'", "'\"'\"'")
    result = k3s.exec(["sh", "-c", f"printf '%s' '{quoted}' | kubectl apply --dry-run=server -f -"])
    output = result.output.decode()
    assert result.exit_code == 0, output
    for kind in ("statefulset.apps/demo-broker", "deployment.apps/demo-gateway", "service/demo-etcd"):
        assert kind in output
