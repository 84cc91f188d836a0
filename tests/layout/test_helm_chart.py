"""The Helm chart renders (with the plain value substitution it limits itself to) into manifests
whose processes would start: every flag is one our programs accept, every port lines up.

No helm binary can be installed here; the chart keeps to `{{ .Values.x.y }}`, `{{ .Release.Name }}`
and `{{ .Chart.* }}` so this test can render it exactly. The testcontainers k3s test (later) runs it
for real where Docker exists.
"""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from tidelog.broker import main as broker_main
from tidelog.controller import main as controller_main
from tidelog.coordinator import main as coordinator_main
from tidelog.gateway import main as gateway_main
from tidelog.operator import main as operator_main

CHART = Path(__file__).resolve().parents[2] / "helm" / "tidelog"
RELEASE = "demo"
NAMESPACE = "streaming"
PLACEHOLDER = re.compile(r"\{\{\s*([^}]*?)\s*\}\}")


def render(template: str, values: dict[str, Any], chart: dict[str, Any]) -> str:
    def resolve(match: re.Match[str]) -> str:
        expression = match.group(1)
        if expression == ".Release.Name":
            return RELEASE
        if expression == ".Release.Namespace":
            return NAMESPACE
        if expression.startswith(".Chart."):
            return str(chart[expression.removeprefix(".Chart.")[0].lower() + expression.removeprefix(".Chart.")[1:]])
        assert expression.startswith(".Values."), f"template uses more than value substitution: {expression}"
        value: Any = values
        for part in expression.removeprefix(".Values.").split("."):
            value = value[part]
        return str(value)

    return PLACEHOLDER.sub(resolve, template)


@pytest.fixture(scope="module")
def manifests() -> dict[tuple[str, str], dict[str, Any]]:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for template in sorted((CHART / "templates").glob("*.yaml")):
        for document in yaml.safe_load_all(render(template.read_text(), values, chart)):
            found[(document["kind"], document["metadata"]["name"])] = document
    return found


def _command_line(statefulset: dict[str, Any]) -> list[str]:
    container = statefulset["spec"]["template"]["spec"]["containers"][0]
    script = container["args"][0].removeprefix("exec ")
    script = script.replace("$(( ${HOSTNAME##*-} + 1 ))", "1").replace("$(HOSTNAME)", "pod-0")
    return shlex.split(script)


def test_etcd_runs_as_a_statefulset(manifests: dict[tuple[str, str], dict[str, Any]]) -> None:
    etcd = manifests[("StatefulSet", f"{RELEASE}-etcd")]
    script = etcd["spec"]["template"]["spec"]["containers"][0]["args"][0]
    assert "--max-txn-ops 1024" in script
    assert etcd["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] == "data"
    assert ("Service", f"{RELEASE}-etcd") in manifests


@pytest.mark.parametrize(
    ("name", "parse"),
    [
        ("broker", broker_main.parse_args),
        ("controller", controller_main.parse_args),
        ("coordinator", coordinator_main.parse_args),
    ],
)
def test_services_start_with_flags_they_accept(
    manifests: dict[tuple[str, str], dict[str, Any]], name: str, parse: Any
) -> None:
    statefulset = manifests[("StatefulSet", f"{RELEASE}-{name}")]
    program, *arguments = _command_line(statefulset)
    assert program == f"tidelog-{name}"
    args = parse(arguments)
    assert args.etcd == f"{RELEASE}-etcd:2379"
    assert args.advertised_host == f"pod-0.{RELEASE}-{name}"
    service_ports = {
        port["name"]: port["port"] for port in manifests[("Service", f"{RELEASE}-{name}")]["spec"]["ports"]
    }
    assert service_ports == {"grpc": args.port, "metrics": args.metrics_port}


def test_gateways_run_behind_one_service_with_authentication_on(
    manifests: dict[tuple[str, str], dict[str, Any]],
) -> None:
    deployment = manifests[("Deployment", f"{RELEASE}-gateway")]
    pod = deployment["spec"]["template"]["spec"]
    script = pod["containers"][0]["args"][0].removeprefix("exec ")
    script = script.replace("$(HOSTNAME)", "gw-0").replace("$(POD_IP)", "10.0.0.7")
    program, *arguments = shlex.split(script)
    assert program == "tidelog-gateway"
    args = gateway_main.parse_args(arguments)
    assert args.etcd == f"{RELEASE}-etcd:2379"
    assert args.advertised_url == f"http://10.0.0.7:{args.port}"  # what other replicas forward to
    mount = pod["containers"][0]["volumeMounts"][0]
    assert str(args.credentials_file).startswith(mount["mountPath"])
    assert [volume["secret"]["secretName"] for volume in pod["volumes"]] == ["tidelog-gateway-credentials"]
    assert pod["containers"][0]["readinessProbe"]["grpc"]["port"] == args.health_port
    service = manifests[("Service", f"{RELEASE}-gateway")]
    assert {port["name"]: port["port"] for port in service["spec"]["ports"]} == {
        "http": args.port,
        "metrics": args.metrics_port,
    }


def test_the_operator_runs_once_with_flags_it_accepts_and_a_role_for_its_resources(
    manifests: dict[tuple[str, str], dict[str, Any]],
) -> None:
    deployment = manifests[("Deployment", f"{RELEASE}-operator")]
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"]["type"] == "Recreate"  # a rollout never runs two at once
    pod = deployment["spec"]["template"]["spec"]
    program, *arguments = shlex.split(pod["containers"][0]["args"][0].removeprefix("exec "))
    assert program == "tidelog-operator"
    args = operator_main.parse_args(arguments)
    assert args.standalone
    broker_port = manifests[("Service", f"{RELEASE}-broker")]["spec"]["ports"][0]["port"]
    controller_port = manifests[("Service", f"{RELEASE}-controller")]["spec"]["ports"][0]["port"]
    assert args.bootstrap == [f"{RELEASE}-broker:{broker_port}"]
    assert args.controller == [f"{RELEASE}-controller:{controller_port}"]
    assert pod["containers"][0]["livenessProbe"]["httpGet"]["port"] == args.health_port
    assert pod["serviceAccountName"] == f"{RELEASE}-operator"
    binding = manifests[("ClusterRoleBinding", f"{RELEASE}-operator")]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": f"{RELEASE}-operator", "namespace": NAMESPACE}]
    rules = manifests[("ClusterRole", f"{RELEASE}-operator")]["rules"]
    granted = {
        (group, resource, verb)
        for rule in rules
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    for resource in ("topics", "consumergroups"):
        assert {("tidelog.io", resource, verb) for verb in ("list", "watch", "patch")} <= granted
        assert ("tidelog.io", f"{resource}/status", "patch") in granted
    assert ("", "events", "create") in granted
    # least privilege: nothing may delete, and nothing outside what kopf and the resources need
    assert not any(verb in ("delete", "*") for _, _, verb in granted)
    assert {group for group, _, _ in granted} == {"tidelog.io", "apiextensions.k8s.io", "", "events.k8s.io"}


def test_uninstall_first_releases_the_operators_finalizers(manifests: dict[tuple[str, str], dict[str, Any]]) -> None:
    job = manifests[("Job", f"{RELEASE}-operator-release-finalizers")]
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "pre-delete"
    pod = job["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == f"{RELEASE}-operator"  # still there while pre-delete hooks run
    assert pod["containers"][0]["command"] == ["tidelog-operator-release-finalizers"]
    scripts = tomllib.loads((CHART.parents[1] / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["tidelog-operator-release-finalizers"] == "tidelog.operator.finalizers:main"
