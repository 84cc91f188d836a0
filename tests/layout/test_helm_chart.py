"""The Helm chart, rendered by Helm itself (v4, through the `helm-python-sdk` wheel: no helm binary
can be installed here), into manifests whose processes would start: every flag is one our programs
accept, every port lines up. The testcontainers k3s test runs it on a real API server where Docker
exists.
"""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from helm_python.chart import Chart
from helm_python.errors import HelmRenderError

from tests.layout.pod_security import chart_promises, restricted_violations
from tidelog.broker import main as broker_main
from tidelog.common.config import ALL_CONFIGS, ConfigDef, ConfigType
from tidelog.common.settings import attribute_of
from tidelog.controller import main as controller_main
from tidelog.coordinator import main as coordinator_main
from tidelog.dev import chart_schema
from tidelog.dev.kube_admission import Admission
from tidelog.gateway import main as gateway_main
from tidelog.operator import main as operator_main
from tidelog.operator import node_rack

CHART = Path(__file__).resolve().parents[2] / "helm" / "tidelog"
RELEASE = "demo"
NAMESPACE = "streaming"


def render(values: dict[str, Any] | None = None) -> dict[str, str]:
    """Template path → rendered text, as `helm template demo helm/tidelog -n streaming` prints."""
    return Chart.load(CHART).render(values, name=RELEASE, namespace=NAMESPACE)


@pytest.fixture(scope="module")
def manifests() -> dict[tuple[str, str], dict[str, Any]]:
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for path, text in sorted(render().items()):
        if not path.endswith(".yaml"):
            continue
        for document in yaml.safe_load_all(text):
            if document:
                found[(document["kind"], document["metadata"]["name"])] = document
    return found


def test_notes_name_the_release_and_the_gateway_credentials() -> None:
    notes = render()["tidelog/templates/NOTES.txt"]
    assert f"release {RELEASE}" in notes
    assert "kubectl create secret generic tidelog-gateway-credentials" in notes


SECURITY_PROPERTIES = "/etc/tidelog/security/security.properties"


@pytest.fixture(scope="module", autouse=True)
def security_properties(
    manifests: dict[tuple[str, str], dict[str, Any]], tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """The rendered security settings as a file: where the pods' mount puts it, here."""
    path = tmp_path_factory.mktemp("security") / "security.properties"
    path.write_text(manifests[("ConfigMap", f"{RELEASE}-security")]["data"]["security.properties"])
    _MOUNTED[SECURITY_PROPERTIES] = str(path)
    return path


_MOUNTED: dict[str, str] = {}


def _mounted(script: str) -> str:
    for inside, here in _MOUNTED.items():
        script = script.replace(inside, here)
    return script


def _command_line(statefulset: dict[str, Any]) -> list[str]:
    container = statefulset["spec"]["template"]["spec"]["containers"][0]
    script = _mounted(container["args"][0].removeprefix("exec "))
    script = script.replace("$(( ${HOSTNAME##*-} + 1 ))", "1").replace("$(HOSTNAME)", "pod-0")
    script = script.replace('"$(cat /var/run/tidelog-rack/rack)"', "eu-west-1b")  # what the init container wrote
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
    if name == "broker":  # the file the broker keeps while ready is the one its readiness probe tests
        probe = statefulset["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["exec"]["command"]
        assert probe == ["test", "-f", args.settings.broker_readiness_file]
    service_ports = {
        port["name"]: port["port"] for port in manifests[("Service", f"{RELEASE}-{name}")]["spec"]["ports"]
    }
    expected = {"grpc": args.port, "metrics": args.metrics_port}
    if name == "broker":  # and its Kafka listener, advertised under the pod's own name
        assert args.kafka_listener is not None
        bound, told = args.kafka_listener
        assert (told.host, told.port) == (f"pod-0.{RELEASE}-broker", bound.port)
        expected["kafka"] = bound.port
    assert service_ports == expected


def test_gateways_run_behind_one_service_with_authentication_on(
    manifests: dict[tuple[str, str], dict[str, Any]],
) -> None:
    deployment = manifests[("Deployment", f"{RELEASE}-gateway")]
    pod = deployment["spec"]["template"]["spec"]
    script = _mounted(pod["containers"][0]["args"][0].removeprefix("exec "))
    script = script.replace("$(HOSTNAME)", "gw-0").replace("$(POD_IP)", "10.0.0.7")
    program, *arguments = shlex.split(script)
    assert program == "tidelog-gateway"
    args = gateway_main.parse_args(arguments)
    assert args.etcd == f"{RELEASE}-etcd:2379"
    assert args.advertised_url == f"https://10.0.0.7:{args.port}"  # what other replicas forward to
    mount = pod["containers"][0]["volumeMounts"][0]
    assert str(args.credentials_file).startswith(mount["mountPath"])
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    assert volumes["credentials"]["secret"]["secretName"] == "tidelog-gateway-credentials"
    assert volumes["tls"]["secret"]["secretName"] == f"{RELEASE}-gateway-tls"
    # HTTPS, HTTP Basic against the SCRAM users, and the cluster over mutual TLS as User:tidelog-gateway.
    assert args.settings.authentication_method == "BASIC"
    assert args.settings.rest_ssl_certificate_location == "/etc/tidelog/tls/tls.crt"
    assert (args.security.security_protocol, args.security.ssl_client_auth) == ("SSL", "required")
    assert pod["containers"][0]["readinessProbe"]["grpc"]["port"] == args.health_port  # health stays plain gRPC
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
    program, *arguments = shlex.split(_mounted(pod["containers"][0]["args"][0].removeprefix("exec ")))
    assert program == "tidelog-operator"
    args = operator_main.parse_args(arguments)
    assert args.standalone
    broker_port = manifests[("Service", f"{RELEASE}-broker")]["spec"]["ports"][0]["port"]
    controller_port = manifests[("Service", f"{RELEASE}-controller")]["spec"]["ports"][0]["port"]
    assert args.bootstrap == [f"{RELEASE}-broker:{broker_port}"]
    assert args.controller == [f"{RELEASE}-controller:{controller_port}"]
    assert pod["containers"][0]["livenessProbe"]["httpGet"]["port"] == args.health_port
    assert pod["serviceAccountName"] == f"{RELEASE}-operator"
    assert args.namespace == [NAMESPACE]  # it watches the release's namespace only, by default
    account = {"kind": "ServiceAccount", "name": f"{RELEASE}-operator", "namespace": NAMESPACE}
    binding = manifests[("RoleBinding", f"{RELEASE}-operator")]
    assert binding["metadata"]["namespace"] == NAMESPACE and binding["subjects"] == [account]
    granted = _granted(manifests[("Role", f"{RELEASE}-operator")]["rules"])
    for resource in ("topics", "consumergroups", "tidelogusers", "users"):
        assert {("tidelog.io", resource, verb) for verb in ("list", "watch", "patch")} <= granted
        assert ("tidelog.io", f"{resource}/status", "patch") in granted
    for owner in ("tidelogusers", "users"):  # blockOwnerDeletion on the Secrets they own
        assert ("tidelog.io", f"{owner}/finalizers", "update") in granted
    assert {("", "secrets", verb) for verb in ("get", "create", "update")} <= granted
    assert ("", "events", "create") in granted
    cluster_wide = _granted(manifests[("ClusterRole", f"{RELEASE}-operator")]["rules"])
    assert manifests[("ClusterRoleBinding", f"{RELEASE}-operator")]["subjects"] == [account]
    # cluster-wide: only kopf's reads and its peering; no Secret, no resource of ours
    assert {resource for _, resource, _ in cluster_wide} == {
        "customresourcedefinitions",
        "namespaces",
        "clusterkopfpeerings",
    }
    # least privilege: nothing may delete
    assert not any(verb in ("delete", "*") for _, _, verb in granted | cluster_wide)
    assert {group for group, _, _ in granted} == {"tidelog.io", "", "events.k8s.io"}


def _granted(rules: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for rule in rules
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


@pytest.mark.parametrize(
    ("operator", "roles_in", "flags"),
    [
        ({"watchNamespaces": ["team-a", "team-b"]}, ["team-a", "team-b"], ["team-a", "team-b"]),
        ({"watchAnyNamespace": True}, [], []),
    ],
)
def test_the_operator_watches_and_may_touch_secrets_only_where_told(
    operator: dict[str, Any], roles_in: list[str], flags: list[str]
) -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    values["operator"].update(operator)
    rendered = [
        document
        for path, text in render(values).items()
        if path.endswith("operator.yaml")
        for document in yaml.safe_load_all(text)
        if document
    ]
    roles = [d["metadata"]["namespace"] for d in rendered if d["kind"] == "Role"]
    assert roles == roles_in
    deployment = next(d for d in rendered if d["kind"] == "Deployment")
    _, *arguments = shlex.split(
        _mounted(deployment["spec"]["template"]["spec"]["containers"][0]["args"][0].removeprefix("exec "))
    )
    assert operator_main.parse_args(arguments).namespace == flags
    hook = next(d for d in rendered if d["kind"] == "Job")["spec"]["template"]["spec"]["containers"][0]["command"]
    assert hook[1::2] == ["--namespace"] * len(flags) and hook[2::2] == flags
    cluster_roles = {d["metadata"]["name"]: _granted(d["rules"]) for d in rendered if d["kind"] == "ClusterRole"}
    secrets_cluster_wide = any(("", "secrets", "get") in rules for rules in cluster_roles.values())
    assert secrets_cluster_wide == bool(operator.get("watchAnyNamespace"))


def test_the_broker_takes_its_rack_from_its_nodes_zone(manifests: dict[tuple[str, str], dict[str, Any]]) -> None:
    statefulset = manifests[("StatefulSet", f"{RELEASE}-broker")]
    pod = statefulset["spec"]["template"]["spec"]
    (init,) = pod["initContainers"]
    assert init["env"] == [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]
    scripts = tomllib.loads((CHART.parents[1] / "pyproject.toml").read_text())["project"]["scripts"]
    program, *arguments = init["command"]
    assert scripts[program] == "tidelog.operator.node_rack:main"
    args = node_rack.parse_args([*arguments, "--node", "n1"])
    assert args.label == "topology.kubernetes.io/zone"
    (written,) = [m["mountPath"] for m in init["volumeMounts"] if m["name"] == "rack"]
    (read,) = [m["mountPath"] for m in pod["containers"][0]["volumeMounts"] if m["name"] == "rack"]
    assert str(args.output).startswith(written + "/") and read == written
    assert f'"$(cat {args.output})"' in pod["containers"][0]["args"][0]
    assert broker_main.parse_args(_command_line(statefulset)[1:]).rack == "eu-west-1b"
    # the broker's role: reading nodes, nothing else
    assert pod["serviceAccountName"] == f"{RELEASE}-broker"
    assert manifests[("ClusterRole", f"{RELEASE}-broker")]["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}
    ]
    binding = manifests[("ClusterRoleBinding", f"{RELEASE}-broker")]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": f"{RELEASE}-broker", "namespace": NAMESPACE}]


def test_without_a_topology_key_brokers_run_without_a_rack_or_a_role() -> None:
    rendered = yaml.safe_load_all(render({"broker": {"rack": {"topologyKey": ""}}})["tidelog/templates/broker.yaml"])
    kinds = {(d["kind"], d["metadata"]["name"]): d for d in rendered if d}
    assert set(kinds) == {("Service", f"{RELEASE}-broker"), ("StatefulSet", f"{RELEASE}-broker")}
    pod = kinds[("StatefulSet", f"{RELEASE}-broker")]["spec"]["template"]["spec"]
    assert "initContainers" not in pod and "serviceAccountName" not in pod
    assert [volume["name"] for volume in pod["volumes"]] == ["tmp", "tls", "security", "etcd-tls"]  # no rack volume
    assert "--rack" not in pod["containers"][0]["args"][0]


def test_uninstall_first_releases_the_operators_finalizers(manifests: dict[tuple[str, str], dict[str, Any]]) -> None:
    job = manifests[("Job", f"{RELEASE}-operator-release-finalizers")]
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "pre-delete"
    pod = job["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == f"{RELEASE}-operator"  # still there while pre-delete hooks run
    assert pod["containers"][0]["command"] == ["tidelog-operator-release-finalizers", "--namespace", NAMESPACE]
    scripts = tomllib.loads((CHART.parents[1] / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["tidelog-operator-release-finalizers"] == "tidelog.operator.finalizers:main"


def test_no_number_is_rendered_in_exponent_form() -> None:
    """Helm reads values as float64 and prints 16777216 as 1.6777216e+07, which no flag accepts:
    large numbers go through `int64` (found when the real renderer replaced a substitution)."""
    for path, text in render().items():
        assert "e+0" not in text, f"{path}: a number rendered as a float"


KUBERNETES = "1.31"  # the oldest Kubernetes the chart supports (gRPC probes, CEL rules in CRDs)


def test_every_manifest_is_valid_for_kubernetes(manifests: dict[tuple[str, str], dict[str, Any]]) -> None:
    for (kind, name), document in manifests.items():
        try:
            kubernetes_validate.validate(document, KUBERNETES, strict=True)
        except kubernetes_validate.ValidationError as error:
            pytest.fail(f"{kind} {name}: {error.message} at {list(error.path)}")


def test_the_validation_catches_a_misspelt_field(manifests: dict[tuple[str, str], dict[str, Any]]) -> None:
    deployment = manifests[("Deployment", f"{RELEASE}-operator")]
    broken = {**deployment, "spec": {**deployment["spec"], "replica": 1}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES, strict=True)


def _documents(rendered: dict[str, str]) -> dict[tuple[str, str], dict[str, Any]]:
    return {
        (document["kind"], document["metadata"]["name"]): document
        for path, text in rendered.items()
        if path.endswith(".yaml")
        for document in yaml.safe_load_all(text)
        if document
    }


@pytest.mark.parametrize("component", ["etcd", "controller", "broker", "coordinator", "gateway"])
def test_every_component_has_probes_resources_and_spreads_over_nodes(
    manifests: dict[tuple[str, str], dict[str, Any]], component: str
) -> None:
    kind = "Deployment" if component == "gateway" else "StatefulSet"
    pod = manifests[(kind, f"{RELEASE}-{component}")]["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["readinessProbe"] and container["livenessProbe"]
    assert container["livenessProbe"]["failureThreshold"] * container["livenessProbe"]["periodSeconds"] >= 60
    assert set(container["resources"]["requests"]) == {"cpu", "memory"}
    term = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"]["matchLabels"]["app.kubernetes.io/name"] == f"tidelog-{component}"


def test_a_disruption_budget_for_every_component_run_more_than_once(
    manifests: dict[tuple[str, str], dict[str, Any]],
) -> None:
    budgets = {name for kind, name in manifests if kind == "PodDisruptionBudget"}
    # etcd runs once by default: a budget of one unavailable would allow its only pod down anyway
    assert budgets == {f"{RELEASE}-{c}" for c in ("controller", "broker", "coordinator", "gateway")}
    for name in budgets:
        assert manifests[("PodDisruptionBudget", name)]["spec"]["maxUnavailable"] == 1


def test_three_etcd_members_form_one_cluster_with_a_budget() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    values["etcd"]["replicas"] = 3
    documents = _documents(render(values))
    etcd = documents[("StatefulSet", f"{RELEASE}-etcd")]
    env = {item["name"]: item.get("value") for item in etcd["spec"]["template"]["spec"]["containers"][0]["env"]}
    members = env["INITIAL_CLUSTER"].split(",")
    assert members == [
        f"{RELEASE}-etcd-{n}=https://{RELEASE}-etcd-{n}.{RELEASE}-etcd:{values['etcd']['peerPort']}" for n in range(3)
    ]
    assert ("PodDisruptionBudget", f"{RELEASE}-etcd") in documents
    for document in documents.values():
        kubernetes_validate.validate(document, KUBERNETES, strict=True)


def _with(values: dict[str, Any], dotted: str, value: Any) -> None:
    """`helm --set`'s path syntax: dots separate keys, `\\.` is a dot inside one (a Kafka name)."""
    *path, last = [part.replace("\\.", ".") for part in re.split(r"(?<!\\)\.", dotted)]
    for part in path:
        values = values.setdefault(part, {})
    values[last] = value


def test_skaffold_builds_the_one_image_and_its_dev_profile_renders_a_one_broker_cluster() -> None:
    skaffold = yaml.safe_load((CHART.parents[1] / "skaffold.yaml").read_text())
    # the services' one image, and Spark's (Java, PySpark and the jobs: tests/spark checks it)
    assert [artifact["image"] for artifact in skaffold["build"]["artifacts"]] == ["tidelog", "tidelog-spark"]
    (dev,) = (profile for profile in skaffold["profiles"] if profile["name"] == "dev")
    (patch,) = dev["patches"]
    assert patch["path"] == "/deploy/helm/releases/0/setValues"
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    for dotted, value in patch["value"].items():
        _with(values, dotted, value)
    documents = _documents(render(values))
    for component in ("broker", "controller", "coordinator", "etcd"):
        assert documents[("StatefulSet", f"{RELEASE}-{component}")]["spec"]["replicas"] == 1
    assert not [name for kind, name in documents if kind == "PodDisruptionBudget"]  # one pod: nothing to budget
    coordinator = documents[("StatefulSet", f"{RELEASE}-coordinator")]
    args = coordinator_main.parse_args(_command_line(coordinator)[1:])
    assert args.settings.offsets_topic_replication_factor == 1  # one broker can hold it
    for document in documents.values():
        kubernetes_validate.validate(document, KUBERNETES, strict=True)


def test_two_operator_replicas_meet_in_kopf_peering_with_distinct_priorities() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    values["operator"]["replicas"] = 2
    documents = _documents(render(values))
    assert ("Deployment", f"{RELEASE}-operator") not in documents
    statefulset = documents[("StatefulSet", f"{RELEASE}-operator")]
    assert statefulset["spec"]["replicas"] == 2
    assert ("ClusterKopfPeering", f"{RELEASE}-operator") in documents
    script = _mounted(statefulset["spec"]["template"]["spec"]["containers"][0]["args"][0].removeprefix("exec "))
    priorities = set()
    for ordinal in (0, 1):  # what the shell makes of each pod's name
        line = script.replace("$(( 1000 - ${HOSTNAME##*-} ))", str(1000 - ordinal))
        args = operator_main.parse_args(shlex.split(line)[1:])
        assert not args.standalone and args.peering == f"{RELEASE}-operator"
        priorities.add(args.priority)
    assert len(priorities) == 2  # equal priorities would freeze both
    # the StatefulSet's governing Service exists, and a drain leaves a replica standing by
    service = documents[("Service", statefulset["spec"]["serviceName"])]
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"] == statefulset["spec"]["selector"]["matchLabels"]
    assert documents[("PodDisruptionBudget", f"{RELEASE}-operator")]["spec"]["maxUnavailable"] == 1
    container = statefulset["spec"]["template"]["spec"]["containers"][0]
    assert container["readinessProbe"]["httpGet"] == container["livenessProbe"]["httpGet"]
    crd = yaml.safe_load((CHART / "crds" / "clusterkopfpeerings.kopf.dev.yaml").read_text())
    assert crd["spec"]["names"]["kind"] == "ClusterKopfPeering"
    for document in documents.values():
        if document["kind"] != "ClusterKopfPeering":  # a custom resource: not in Kubernetes' schemas
            kubernetes_validate.validate(document, KUBERNETES, strict=True)


def test_alert_rules_ship_as_a_rule_file_and_on_request_as_a_prometheus_rule(
    manifests: dict[tuple[str, str], dict[str, Any]],
) -> None:
    rules_file = (CHART / "files" / "alerts.yaml").read_text()
    config_map = manifests[("ConfigMap", f"{RELEASE}-alert-rules")]
    assert yaml.safe_load(config_map["data"]["tidelog-alerts.yaml"]) == yaml.safe_load(rules_file)
    assert not any(kind in ("PrometheusRule", "PodMonitor") for kind, _ in manifests)  # CRDs may be absent

    values = {
        "monitoring": {
            "prometheusRule": {"enabled": True, "labels": {"release": "kps"}},
            "podMonitors": {"enabled": True},
        }
    }
    rendered = [d for d in yaml.safe_load_all(render(values)["tidelog/templates/monitoring.yaml"]) if d]
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for document in rendered:
        by_kind.setdefault(document["kind"], []).append(document)
    (rule,) = by_kind["PrometheusRule"]
    assert rule["apiVersion"] == "monitoring.coreos.com/v1" and rule["metadata"]["labels"]["release"] == "kps"
    assert rule["spec"]["groups"] == yaml.safe_load(rules_file)["groups"]
    pods = {
        document["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"]: document["spec"]["template"][
            "spec"
        ]
        for (kind, _), document in manifests.items()
        if kind in ("StatefulSet", "Deployment")
    }
    monitored = set()
    for monitor in by_kind["PodMonitor"]:
        selected = monitor["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"]
        ports = {port["name"] for port in pods[selected]["containers"][0]["ports"]}
        assert monitor["spec"]["podMetricsEndpoints"][0]["port"] in ports
        assert monitor["metadata"]["name"].endswith(selected.removeprefix("tidelog-"))  # job label, as the rules expect
        # The labels Strimzi's dashboards select on, by the rules `tidelog dev up`'s Prometheus runs too.
        relabelings = yaml.safe_load((CHART / "files" / "pod-relabelings.yaml").read_text())
        assert monitor["spec"]["podMetricsEndpoints"][0]["relabelings"] == relabelings
        assert {rule["targetLabel"] for rule in relabelings} >= {
            "namespace",
            "kubernetes_pod_name",
            "strimzi_io_cluster",
        }
        monitored.add(selected)
    # Strimzi's dashboards select the brokers' kubelet and process figures on container="kafka".
    assert [container["name"] for container in pods["tidelog-broker"]["containers"]] == ["kafka"]
    assert monitored == {f"tidelog-{c}" for c in ("broker", "controller", "coordinator", "gateway", "operator")}


def test_dashboards_ship_as_configmaps_for_grafanas_sidecar(manifests: dict[tuple[str, str], dict[str, Any]]) -> None:
    shipped = {path.name: path.read_text() for path in (CHART / "files" / "dashboards").glob("*.json")}
    assert shipped
    found = {}
    for (kind, _), document in manifests.items():
        if kind == "ConfigMap" and document["metadata"].get("labels", {}).get("grafana_dashboard") == "1":
            assert document["metadata"]["annotations"]["grafana_folder"] == "Tidelog"
            found.update(document["data"])
    assert {name: json.loads(text) for name, text in found.items()} == {
        name: json.loads(text) for name, text in shipped.items()
    }
    off = render({"monitoring": {"dashboards": {"enabled": False}}})["tidelog/templates/monitoring.yaml"]
    assert "grafana_dashboard" not in off


def test_security_is_on_by_default_with_a_ca_and_a_certificate_per_component(
    manifests: dict[tuple[str, str], dict[str, Any]], security_properties: Path
) -> None:

    from tidelog.common.settings import SecuritySettings, read_properties  # noqa: PLC0415

    settings = SecuritySettings.from_configs(read_properties(security_properties))
    assert (settings.security_protocol, settings.ssl_client_auth, settings.authorizer_class_name) == (
        "SSL",
        "required",
        "AclAuthorizer",
    )
    assert SecuritySettings.principals(settings.super_users) == {"User:tidelog-operator"}
    assert settings.broker_principals == "User:tidelog-broker"
    # No key material in the manifests: a hook makes the CAs and certificates in the cluster
    # (operator/cluster_certificates.py, tests/operator/test_cluster_certificates.py).
    assert not [name for (kind, name) in manifests if kind == "Secret"]
    job = manifests[("Job", f"{RELEASE}-certificates")]
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"
    command = job["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[0] == "tidelog-cluster-certificates"
    options = dict(zip(command[1::2], command[2::2], strict=True))
    assert (options["--namespace"], options["--release"]) == (NAMESPACE, RELEASE)
    made = {f"{RELEASE}-{c}-tls" for c in options["--components"].split(",")}
    made |= {f"{RELEASE}-{c}-etcd-tls" for c in [*options["--etcd-clients"].split(","), "etcd"]}
    mounted = {
        volume["secret"]["secretName"]
        for kind, name in manifests
        if kind in ("StatefulSet", "Deployment")
        for volume in manifests[(kind, name)]["spec"]["template"]["spec"].get("volumes", [])
        if "secret" in volume and volume["secret"]["secretName"] != "tidelog-gateway-credentials"
    }
    assert mounted - {f"{RELEASE}-cluster-ca"} <= made  # every certificate a pod mounts is made
    named, create = manifests[("Role", f"{RELEASE}-certificates")]["rules"]
    assert named["resources"] == ["secrets"] and named["verbs"] == ["get", "patch"]
    assert set(named["resourceNames"]) == made | {f"{RELEASE}-cluster-ca", f"{RELEASE}-etcd-ca"}
    assert create == {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]}
    # the install hook's account is a hook too (it must exist before the release's resources)
    assert job["spec"]["template"]["spec"]["serviceAccountName"] == f"{RELEASE}-certificates-hook"
    assert manifests[("Role", f"{RELEASE}-certificates-hook")]["rules"] == [named, create]
    # and the same runs daily: certificates due are issued again while the cluster runs
    cronjob = manifests[("CronJob", f"{RELEASE}-certificates")]["spec"]
    renewal = cronjob["jobTemplate"]["spec"]["template"]["spec"]
    assert renewal["containers"][0]["command"] == command and renewal["serviceAccountName"] == f"{RELEASE}-certificates"
    assert cronjob["concurrencyPolicy"] == "Forbid" and cronjob["schedule"]
    # TLS listeners: kubelet's gRPC probe speaks no TLS, a TCP probe stands in for liveness; the
    # broker's readiness is the file it keeps (no partition it hosts under-replicated), either way.
    broker = manifests[("StatefulSet", f"{RELEASE}-broker")]["spec"]["template"]["spec"]["containers"][0]
    assert "tcpSocket" in broker["livenessProbe"]
    assert broker["readinessProbe"]["exec"]["command"] == ["test", "-f", "/tmp/tidelog-ready"]


def test_with_cert_manager_it_issues_the_certificates() -> None:
    documents = _documents(render({"security": {"certManager": {"enabled": True}}}))
    certificates = {name: d for (kind, name), d in documents.items() if kind == "Certificate"}
    assert certificates[f"{RELEASE}-cluster-ca"]["spec"]["isCA"] is True
    broker = certificates[f"{RELEASE}-broker-tls"]["spec"]
    assert broker["issuerRef"]["name"] == f"{RELEASE}-cluster-ca" and broker["commonName"] == "tidelog-broker"
    assert not [name for (kind, name) in documents if kind == "Secret" and name.endswith("-tls")]


def test_security_can_be_turned_off() -> None:
    documents = _documents(render({"security": {"enabled": False}}))
    assert not [key for key in documents if key[0] == "Secret" or key == ("ConfigMap", f"{RELEASE}-security")]
    broker = documents[("StatefulSet", f"{RELEASE}-broker")]["spec"]["template"]["spec"]["containers"][0]
    assert "grpc" in broker["livenessProbe"] and "--config-file" not in broker["args"][0]


# Documented values profiles (values.yaml's comments, docs/operator.md): each renders pods that Pod
# Security Admission admits at `restricted`, and keeps the chart's own promises.
PROFILES = {
    "default": {},
    "security off": {"security": {"enabled": False}},
    "operator HA": {"operator": {"replicas": 2}},
    "no rack": {"broker": {"rack": {"topologyKey": ""}}},
    "etcd quorum": {"etcd": {"replicas": 3}},
    "spark and monitoring": {"spark": {"enabled": True}, "monitoring": {"podMonitors": {"enabled": True}}},
}


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_every_pod_passes_pod_security_restricted(profile: str) -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    for dotted, value in _flatten(PROFILES[profile]):
        _with(values, dotted, value)
    pods = {
        name: (document["spec"]["jobTemplate"]["spec"] if kind == "CronJob" else document["spec"])["template"]["spec"]
        for (kind, name), document in _documents(render(values)).items()
        if kind in ("Deployment", "StatefulSet", "Job", "DaemonSet", "CronJob")
    }
    assert pods
    refused = {name: restricted_violations(spec) + chart_promises(spec) for name, spec in pods.items()}
    assert {name: problems for name, problems in refused.items() if problems} == {}


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_every_object_of_every_profile_is_valid_in_strict_mode(profile: str) -> None:
    """Kubernetes' schemas, strictly, for every built-in object; custom resources are checked
    against their CRDs (ours: tests/operator; others': the third-party test below)."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    for dotted, value in _flatten(PROFILES[profile]):
        _with(values, dotted, value)
    for (kind, name), document in _documents(render(values)).items():
        if kind == "ClusterKopfPeering":  # a custom resource of a CRD the chart ships: admitted by it
            crd = yaml.safe_load((CHART / "crds" / "clusterkopfpeerings.kopf.dev.yaml").read_text())
            Admission(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"], status_subresource=False).admit(
                document, None, None
            )
            continue
        if "." in document["apiVersion"].split("/")[0] and not document["apiVersion"].startswith(
            ("apps/", "batch/", "policy/", "rbac.authorization.k8s.io/", "networking.k8s.io/")
        ):
            continue  # a custom resource of another project's (their schemas: the test below)
        try:
            kubernetes_validate.validate(document, KUBERNETES, strict=True)
        except kubernetes_validate.ValidationError as error:
            raise AssertionError(f"{profile}: {kind}/{name}: {error}") from None


def _flatten(values: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    found: list[tuple[str, Any]] = []
    for key, value in values.items():
        if isinstance(value, dict) and value:
            found += _flatten(value, f"{prefix}{key}.")
        else:
            found.append((f"{prefix}{key}", value))
    return found


def test_the_pod_security_check_refuses_what_restricted_refuses() -> None:
    """The checker itself: the chart's pods before issue 30 (root, no security context) fail it."""
    spec: dict[str, Any] = {
        "containers": [{"name": "broker", "image": "tidelog", "resources": {"requests": {"cpu": "1"}}}],
        "volumes": [{"name": "host", "hostPath": {"path": "/var"}}],
    }
    refused = restricted_violations(spec)
    assert "allowPrivilegeEscalation != false: containers[broker]" in refused
    assert "unrestricted capabilities: containers[broker] must drop ALL" in refused
    assert "runAsNonRoot != true: containers[broker]" in refused
    assert "seccompProfile: containers[broker] must be RuntimeDefault or Localhost" in refused
    assert "hostPath volumes: host" in refused
    assert chart_promises(spec) == [
        "readOnlyRootFilesystem != true: containers[broker]",
        "no memory limit: containers[broker]",
    ]


def test_the_image_runs_as_the_user_the_chart_names() -> None:
    dockerfile = (CHART.parents[1] / "Dockerfile").read_text()
    services_stage = dockerfile.split("FROM ", 2)[1]
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    uid, gid = values["podSecurityContext"]["runAsUser"], values["podSecurityContext"]["runAsGroup"]
    assert f"USER {uid}:{gid}" in services_stage
    assert f"useradd --uid {uid} --gid {gid}" in services_stage


def test_only_the_components_that_use_etcd_may_reach_it(manifests: dict[tuple[str, str], dict[str, Any]]) -> None:
    policy = manifests[("NetworkPolicy", f"{RELEASE}-etcd")]["spec"]
    assert policy["podSelector"]["matchLabels"]["app.kubernetes.io/name"] == "tidelog-etcd"
    client, peer, metrics = policy["ingress"]
    assert metrics == {"ports": [{"port": 2381, "protocol": "TCP"}]}
    assert client["ports"] == [{"port": 2379, "protocol": "TCP"}]
    allowed = {source["podSelector"]["matchLabels"]["app.kubernetes.io/name"] for source in client["from"]}
    assert allowed == {f"tidelog-{c}" for c in ("controller", "broker", "coordinator", "gateway")}
    # the operator reaches brokers and controllers only: its flags name no etcd
    operator = manifests[("Deployment", f"{RELEASE}-operator")]["spec"]["template"]["spec"]["containers"][0]
    assert "--etcd" not in operator["args"][0]
    assert peer["ports"] == [{"port": 2380, "protocol": "TCP"}]
    assert [s["podSelector"]["matchLabels"]["app.kubernetes.io/name"] for s in peer["from"]] == ["tidelog-etcd"]
    for component in ("controller", "broker", "coordinator", "gateway", "operator"):
        spec = manifests[("NetworkPolicy", f"{RELEASE}-{component}")]["spec"]
        kind = "StatefulSet" if component in ("controller", "broker", "coordinator") else "Deployment"
        container = manifests[(kind, f"{RELEASE}-{component}")]["spec"]["template"]["spec"]["containers"][0]
        assert {p["port"] for p in spec["ingress"][0]["ports"]} == {p["containerPort"] for p in container["ports"]}


def test_with_security_on_etcd_wants_a_client_certificate_of_its_own_ca(
    manifests: dict[tuple[str, str], dict[str, Any]],
) -> None:
    etcd = manifests[("StatefulSet", f"{RELEASE}-etcd")]["spec"]["template"]["spec"]
    script = etcd["containers"][0]["args"][0]
    for flag in ("--client-cert-auth", "--trusted-ca-file /etc/etcd/tls/ca.crt", "--peer-client-cert-auth"):
        assert flag in script
    assert "--listen-client-urls https://" in script and "http://0.0.0.0:2379" not in script
    assert etcd["containers"][0]["readinessProbe"]["httpGet"]["port"] == 2381  # plain /health
    properties = manifests[("ConfigMap", f"{RELEASE}-security")]["data"]["security.properties"]
    assert "etcd.ssl.certificate.location=/etc/tidelog/etcd-tls/tls.crt" in properties
    for component in ("controller", "broker", "coordinator", "gateway"):
        kind = "Deployment" if component == "gateway" else "StatefulSet"
        pod = manifests[(kind, f"{RELEASE}-{component}")]["spec"]["template"]["spec"]
        secrets = {v["name"]: v.get("secret", {}).get("secretName") for v in pod["volumes"]}
        assert secrets["etcd-tls"] == f"{RELEASE}-{component}-etcd-tls"
        mounts = {m["name"]: m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
        assert mounts["etcd-tls"] == "/etc/tidelog/etcd-tls"
    # etcd's certificates come from a CA of its own (the hook's --etcd-clients: etcd-ca), not the
    # cluster CA, which also signs users' client certificates
    command = manifests[("Job", f"{RELEASE}-certificates")]["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[command.index("--etcd-clients") + 1] == "controller,broker,coordinator,gateway"
    operator = manifests[("Deployment", f"{RELEASE}-operator")]["spec"]["template"]["spec"]
    assert "etcd-tls" not in {v["name"] for v in operator["volumes"]}  # it never talks to etcd


def test_with_security_off_etcd_speaks_plain_http() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    values["security"]["enabled"] = False
    etcd = _documents(render(values))[("StatefulSet", f"{RELEASE}-etcd")]
    script = etcd["spec"]["template"]["spec"]["containers"][0]["args"][0]
    assert "--listen-client-urls http://0.0.0.0:2379" in script and "--client-cert-auth" not in script


def test_brokers_spread_over_zones_and_nodes(manifests: dict[tuple[str, str], dict[str, Any]]) -> None:
    pod = manifests[("StatefulSet", f"{RELEASE}-broker")]["spec"]["template"]["spec"]
    spread = {c["topologyKey"]: c for c in pod["topologySpreadConstraints"]}
    assert set(spread) == {"topology.kubernetes.io/zone", "kubernetes.io/hostname"}
    for constraint in spread.values():
        assert constraint["whenUnsatisfiable"] == "ScheduleAnyway" and constraint["maxSkew"] == 1
        assert constraint["labelSelector"]["matchLabels"]["app.kubernetes.io/name"] == "tidelog-broker"


def test_a_misspelt_or_mistyped_value_is_refused_by_helm() -> None:
    with pytest.raises(Exception, match="additional properties 'brokr' not allowed"):
        render({"brokr": {"replicas": 3}})
    with pytest.raises(Exception, match="replicas"):
        render({"broker": {"replicas": "three"}})
    with pytest.raises(Exception, match="additional properties 'topologykey' not allowed"):
        render({"broker": {"rack": {"topologykey": "zone"}}})


def test_the_values_schema_holds_every_value_and_closes_every_object_of_ours() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())

    def walk(node: dict[str, Any], value: Any, path: str) -> None:
        if not isinstance(value, dict) or node.get("additionalProperties") is not False:
            return  # a leaf, or a Kubernetes object / label map Kubernetes itself checks
        if path.endswith(".config"):  # a component's settings: values.yaml shows some, the registry has all
            assert set(value) <= set(node["properties"]), path
            return
        assert set(value) == set(node["properties"]), path
        for key, child in value.items():
            walk(node["properties"][key], child, f"{path}.{key}")

    walk(schema, values, "values")


THIRD_PARTY = Path(__file__).parent / "third_party_schemas"


def _strict(schema: dict[str, Any]) -> dict[str, Any]:
    """A CRD schema as the API server applies it with strict field validation (kubectl's default):
    an unknown field is an error wherever fields are listed and unknown ones are not preserved."""
    copied = {key: value for key, value in schema.items() if not key.startswith("x-kubernetes-")}
    if "properties" in schema:
        copied["properties"] = {name: _strict(child) for name, child in schema["properties"].items()}
        if not schema.get("x-kubernetes-preserve-unknown-fields") and "additionalProperties" not in schema:
            copied["additionalProperties"] = False
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            copied[key] = _strict(schema[key])
    for key in ("allOf", "anyOf", "oneOf"):
        if key in schema:
            copied[key] = [_strict(branch) for branch in schema[key]]
    return copied


def test_third_party_resources_are_valid_against_their_projects_crds() -> None:
    """cert-manager's Certificates and Issuers, the Prometheus Operator's PodMonitors and
    PrometheusRules, against the schemas those projects publish (kept here with their licences)."""
    import jsonschema  # noqa: PLC0415

    schemas = {}
    for path in THIRD_PARTY.glob("*.json"):
        published = json.loads(path.read_text())
        schemas[(f"{published['group']}/{published['version']}", published["kind"])] = _strict(
            published["openAPIV3Schema"]
        )
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    values["security"]["certManager"]["enabled"] = True
    values["monitoring"]["prometheusRule"]["enabled"] = True
    values["monitoring"]["podMonitors"]["enabled"] = True
    checked = set()
    for document in _documents(render(values)).values():
        key = (document["apiVersion"], document["kind"])
        if key[0].split("/")[0] in ("cert-manager.io", "monitoring.coreos.com"):
            assert key in schemas, f"no published schema kept for {key}"
            errors = sorted(e.message for e in jsonschema.Draft7Validator(schemas[key]).iter_errors(document))
            assert errors == [], (document["metadata"]["name"], errors)
            checked.add(key[1])
    assert checked == {"Certificate", "Issuer", "PodMonitor", "PrometheusRule"}


def test_the_strict_check_catches_a_misspelt_third_party_field() -> None:
    import jsonschema  # noqa: PLC0415

    published = json.loads((THIRD_PARTY / "certificates.cert-manager.io.json").read_text())
    certificate = {
        "apiVersion": "cert-manager.io/v1",
        "kind": "Certificate",
        "metadata": {"name": "c"},
        "spec": {"secretName": "s", "issuerRef": {"name": "i"}, "renewBfore": "1h"},
    }
    errors = [
        e.message for e in jsonschema.Draft7Validator(_strict(published["openAPIV3Schema"])).iter_errors(certificate)
    ]
    assert any("renewBfore" in error for error in errors)


def test_a_render_holds_no_randomness() -> None:
    """Rendered twice, the same manifests: `helm template` and Argo CD make no new CA per render."""
    assert render() == render()


def test_an_offsets_topic_replication_factor_above_the_broker_count_is_refused_at_render() -> None:
    """Issue 32: Kafka creates __consumer_offsets with exactly offsets.topic.replication.factor
    replicas or not at all; a chart whose brokers cannot hold it says so before anything starts."""
    with pytest.raises(HelmRenderError, match=r"replication.factor \(3\) exceeds broker.replicas \(1\)"):
        render({"broker": {"replicas": 1}})
    rendered = render({"broker": {"replicas": 1}, "coordinator": {"config": {"offsets.topic.replication.factor": 1}}})
    assert '--config "offsets.topic.replication.factor=1"' in rendered["tidelog/templates/coordinator.yaml"]


COMPONENT_MAINS = {
    "controller": controller_main,
    "broker": broker_main,
    "coordinator": coordinator_main,
    "gateway": gateway_main,
    "operator": operator_main,
}


@pytest.mark.parametrize("component", sorted(COMPONENT_MAINS))
def test_any_setting_of_a_component_passes_from_its_config_map_to_its_process(component: str) -> None:
    """As Strimzi's spec.kafka.config: every setting of the component's scope, by its Kafka name,
    reaches the process's settings object; values.yaml's own choices too."""
    definitions = chart_schema.configurable(component)
    given = {definition.name: _another_value(definition) for definition in definitions}
    # (brokers enough for any offsets.topic.replication.factor the coordinator is given)
    values: dict[str, Any] = {"broker": {"replicas": 5}}
    values.setdefault(component, {})["config"] = given
    documents = _documents(render(values))
    workload = next(
        document
        for document in documents.values()
        if document["kind"] in ("StatefulSet", "Deployment")
        and document["metadata"]["name"] == f"{RELEASE}-{component}"
    )
    if component in ("gateway", "operator"):
        pod = workload["spec"]["template"]["spec"]
        arguments = shlex.split(_mounted(pod["containers"][0]["args"][0].removeprefix("exec ")))[1:]
    else:
        arguments = _command_line(workload)[1:]
    settings = COMPONENT_MAINS[component].parse_args(arguments).settings
    for definition in definitions:
        wanted = definition.parse(given[definition.name])
        assert getattr(settings, attribute_of(definition.name)) == wanted, definition.name
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())[component]["config"]
    assert defaults, f"{component}: values.yaml shows its config map"
    assert set(defaults) <= {definition.name for definition in definitions}
    every = {definition.name for definition in ALL_CONFIGS if definition.scope is chart_schema.COMPONENTS[component]}
    assert every - {definition.name for definition in definitions} == chart_schema.CHART_MANAGED.get(component, set())


def _another_value(definition: ConfigDef) -> object:
    """A valid value other than the default, of the type a values file holds."""
    if definition.choices is not None:
        others = [choice for choice in definition.choices if choice != definition.default]
        choice = others[0] if others else definition.choices[0]
        return [choice] if definition.type is ConfigType.LIST else choice
    match definition.type:
        case ConfigType.BOOLEAN:
            return not definition.default
        case ConfigType.INT | ConfigType.LONG:
            value = int(definition.default) + 1  # type: ignore[arg-type]
            return value if definition.maximum is None or value <= definition.maximum else value - 2
        case ConfigType.DOUBLE:
            return float(definition.default) + 0.5  # type: ignore[arg-type]
        case ConfigType.LIST:
            return ["x", "y"]
    return f"{definition.default}-x" if definition.default else "x"


@pytest.mark.parametrize(
    ("config", "refused"),
    [
        ({"num.io.thread": 8}, "additional properties 'num.io.thread' not allowed"),  # misspelt
        ({"num.io.threads": 0}, "minimum"),  # out of the registry's bounds
        ({"num.io.threads": "eight"}, "integer"),
        ({"offsets.topic.num.partitions": 5}, "additional properties"),  # the coordinator's, not the broker's
        ({"security.protocol": "SSL"}, "additional properties"),  # security has its own block
    ],
)
def test_a_config_the_registry_does_not_have_is_refused_by_helm(config: dict[str, object], refused: str) -> None:
    with pytest.raises(Exception, match=refused):
        render({"broker": {"config": config}})


def test_the_config_schemas_are_generated_from_the_registry() -> None:
    committed = (CHART / "values.schema.json").read_text()
    fresh = chart_schema.rendered(chart_schema.with_config_schemas(json.loads(committed)))
    assert committed == fresh, "stale: run python -m tidelog.dev.chart_schema"
