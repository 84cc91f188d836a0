"""The Helm chart's manifests, as Helm renders them in tests/layout, accepted by a real Kubernetes
API server (k3s in a container) in a server-side dry run, and the CRDs installed there with the
example resources applied to them and a bad one refused: field names, types, references, schemas
and CEL rules checked by Kubernetes itself rather than by our reading of them."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import yaml
from testcontainers.core.container import DockerContainer

from ..layout.test_helm_chart import CHART, render

EXAMPLES = CHART.parents[1] / "examples" / "kubernetes"

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


def _apply(k3s: DockerContainer, text: str, *options: str) -> tuple[int | None, str]:
    quoted = text.replace("'", "'\"'\"'")
    result = k3s.exec(["sh", "-c", f"printf '%s' '{quoted}' | kubectl apply {' '.join(options)} -f -"])
    return result.exit_code, result.output.decode()


def test_the_chart_is_accepted_by_a_kubernetes_api_server(k3s: DockerContainer) -> None:
    manifests = "\n---\n".join(text for path, text in sorted(render().items()) if path.endswith(".yaml"))
    code, output = _apply(k3s, manifests, "--dry-run=server")
    assert code == 0, output
    for kind in ("statefulset.apps/demo-broker", "deployment.apps/demo-gateway", "service/demo-etcd"):
        assert kind in output


def test_the_crds_take_the_examples_and_refuse_a_bad_topic(k3s: DockerContainer) -> None:
    crds = "\n---\n".join(path.read_text() for path in sorted((CHART / "crds").glob("*.yaml")))
    code, output = _apply(k3s, crds)
    assert code == 0, output
    waited = k3s.exec(
        "kubectl wait --for condition=established --timeout=60s crd/topics.tidelog.io crd/consumergroups.tidelog.io"
    )
    assert waited.exit_code == 0, waited.output.decode()
    examples = "\n---\n".join(path.read_text() for path in sorted(EXAMPLES.glob("*.yaml")))
    code, output = _apply(k3s, examples)
    assert code == 0, output
    listed = k3s.exec("kubectl get topics,consumergroups -A").output.decode()
    for path in EXAMPLES.glob("*.yaml"):
        assert yaml.safe_load(path.read_text())["metadata"]["name"] in listed
    bad = yaml.safe_dump(
        {
            "apiVersion": "tidelog.io/v1beta1",
            "kind": "Topic",
            "metadata": {"name": "bad-assignment"},
            "spec": {"partitions": 2, "replicas": 1, "assignment": [[1]]},  # one list for two partitions
        }
    )
    code, output = _apply(k3s, bad, "--dry-run=server")
    assert code != 0 and "assignment must list every partition" in output, output
