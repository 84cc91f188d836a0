"""The CRDs: generated from operator/crds.py (and the config registry), and every example resource
valid against them while bad specs are not. The API server's CEL rules (x-kubernetes-validations)
are checked here by their Python equivalents; structural checks by jsonschema on the same schema."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tidelog.common.config import LOG_CONFIGS
from tidelog.operator.crds import CONSUMER_GROUP_CRD, CRD_FILES, TIDELOG_USER_CRD, TOPIC_CRD, USER_CRD, render

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples" / "kubernetes").glob("*.yaml"))


def _schema(crd: dict[str, Any]) -> dict[str, Any]:
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def _errors(crd: dict[str, Any], resource: dict[str, Any]) -> list[str]:
    validator = jsonschema.Draft7Validator(_schema(crd))
    found = [error.message for error in validator.iter_errors(resource)]
    spec = resource.get("spec", {})
    if crd is TOPIC_CRD and "assignment" in spec:  # the CEL rules on spec
        if len(spec["assignment"]) != spec["partitions"]:
            found.append("assignment must list every partition")
        if any(len(replicas) != spec["replicas"] for replicas in spec["assignment"]):
            found.append("each partition's assignment must list `replicas` brokers")
    reset = spec.get("resetOffsets") if crd is CONSUMER_GROUP_CRD else None
    if reset and reset.get("to") == "timestamp" and "timestamp" not in reset:
        found.append("to: timestamp needs timestamp")
    return found


def test_the_chart_holds_the_generated_crds() -> None:
    for name, crd in CRD_FILES.items():
        written = (ROOT / "helm" / "tidelog" / "crds" / name).read_text()
        assert written == render(crd), "run: python -m tidelog.operator.crds"


@pytest.mark.parametrize("path", EXAMPLES, ids=[path.name for path in EXAMPLES])
def test_every_example_is_valid(path: Path) -> None:
    resource = yaml.safe_load(path.read_text())
    crd = {"Topic": TOPIC_CRD, "ConsumerGroup": CONSUMER_GROUP_CRD, "TidelogUser": TIDELOG_USER_CRD, "User": USER_CRD}[
        resource["kind"]
    ]
    assert resource["apiVersion"] == f"{crd['spec']['group']}/{crd['spec']['versions'][0]['name']}"
    assert _errors(crd, resource) == []


def _topic(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "tidelog.io/v1beta1", "kind": "Topic", "metadata": {"name": "t"}, "spec": spec}


@pytest.mark.parametrize(
    ("spec", "complaint"),
    [
        ({"partitions": 0, "replicas": 1}, "less than the minimum"),
        ({"partitions": 1}, "'replicas' is a required property"),
        ({"partitions": 1, "replicas": 1, "config": {"segment.bytes": 1.5}}, "is not valid under any"),
        ({"partitions": 1, "replicas": 1, "config": {"cleanup.policy": "compact,shred"}}, "does not match"),
        ({"partitions": 1, "replicas": 1, "config": {"min.cleanable.dirty.ratio": 1.5}}, "greater than the maximum"),
        ({"partitions": 1, "replicas": 1, "topicName": "no spaces"}, "does not match"),
        ({"partitions": 1, "replicas": 1, "deletionPolicy": "Orphan"}, "is not one of"),
        ({"partitions": 2, "replicas": 1, "assignment": [[1]]}, "assignment must list every partition"),
        ({"partitions": 1, "replicas": 2, "assignment": [[1]]}, "must list `replicas` brokers"),
    ],
)
def test_a_bad_topic_spec_is_refused_with_its_reason(spec: dict[str, Any], complaint: str) -> None:
    assert any(complaint in error for error in _errors(TOPIC_CRD, _topic(**spec))), _errors(TOPIC_CRD, _topic(**spec))


@pytest.mark.parametrize(
    "config",
    [{"retention.mss": 1}, {"min.insync.replicas": 0}, {"segment.bytes": "1 GiB"}],
)
def test_configs_a_structural_schema_cannot_refuse_reach_the_operator(config: dict[str, Any]) -> None:
    """Unknown configs are kept, and int-or-string has no bounds: the cluster refuses them and the
    Topic's condition says InvalidConfig (test_topic_reconciler)."""
    assert _errors(TOPIC_CRD, _topic(partitions=1, replicas=1, config=config)) == []


def test_every_topic_config_of_the_registry_is_in_the_schema() -> None:
    properties = _schema(TOPIC_CRD)["properties"]["spec"]["properties"]["config"]["properties"]
    assert set(properties) == {definition.name for definition in LOG_CONFIGS}


def test_a_timestamp_reset_needs_its_timestamp() -> None:
    group = {
        "apiVersion": "tidelog.io/v1beta1",
        "kind": "ConsumerGroup",
        "metadata": {"name": "g"},
        "spec": {"resetOffsets": {"id": "r1", "to": "timestamp"}},
    }
    assert "to: timestamp needs timestamp" in _errors(CONSUMER_GROUP_CRD, group)
    group["spec"]["resetOffsets"]["timestamp"] = 1_700_000_000_000
    assert _errors(CONSUMER_GROUP_CRD, group) == []


def test_the_user_crd_refuses_a_bad_acl_and_maps_to_kafka_bindings() -> None:
    from tidelog.operator.user_reconciler import UserSpec  # noqa: PLC0415

    bad = {
        "apiVersion": "tidelog.io/v1beta1",
        "kind": "User",
        "metadata": {"name": "u"},
        "spec": {"authorization": {"type": "simple", "acls": [{"resource": {"type": "topic"}, "operations": ["Fly"]}]}},
    }
    assert any("Fly" in error for error in _errors(USER_CRD, bad))
    spec = yaml.safe_load((ROOT / "examples" / "kubernetes" / "user-orders-app.yaml").read_text())
    user = UserSpec.from_resource("orders-app", spec["spec"])
    assert user.authentication == "scram-sha-512" and user.quotas == {
        "producer_byte_rate": 10485760.0,
        "consumer_byte_rate": 20971520.0,
    }
    assert {str(binding) for binding in user.acls} == {
        "Allow User:orders-app from * to Write Topic:Prefixed:orders",
        "Allow User:orders-app from * to Describe Topic:Prefixed:orders",
        "Allow User:orders-app from * to Read Topic:Prefixed:orders",
        "Allow User:orders-app from * to Read Group:Prefixed:orders-",
    }
