"""The Spark jobs' Kubernetes manifests: SparkApplications checked against the Spark Operator's
own models (kubeflow-spark-api, generated from its OpenAPI schema; unknown fields refused as the
API server's strict validation does), the spark-submit Job and the chart's driver RBAC against the
Kubernetes schemas, and every job path and argument against the jobs themselves."""

from __future__ import annotations

import re
import typing
from pathlib import Path
from typing import Any

import kubernetes_validate
import pydantic
import pytest
import yaml
from kubeflow_spark_api.models.spark_v1beta2_spark_application import SparkV1beta2SparkApplication

from tests.layout.test_helm_chart import KUBERNETES, render
from tidelog.spark_jobs import windowed_totals

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "kubernetes" / "spark"
IMAGE_APP = "local:///app/"  # the Dockerfile's spark stage copies the repository under /app


def _unknown_fields(model: type[pydantic.BaseModel], data: Any, where: str = "") -> list[str]:
    """Keys the model does not define, anywhere below (pydantic ignores them; the API server's
    strict field validation refuses them)."""
    if not isinstance(data, dict):
        return []
    fields = {(field.alias or name): field for name, field in model.model_fields.items()}
    found = [f"{where}.{key}" for key in data if key not in fields]
    for key, value in data.items():
        if key in fields:
            found += _nested(fields[key].annotation, value, f"{where}.{key}")
    return found


def _nested(annotation: Any, value: Any, where: str) -> list[str]:
    origin, arguments = typing.get_origin(annotation), typing.get_args(annotation)
    if isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel):
        return _unknown_fields(annotation, value, where)
    if origin in (list, typing.List) and isinstance(value, list):  # noqa: UP006 - what the models use
        return [f for n, item in enumerate(value) for f in _nested(arguments[0], item, f"{where}[{n}]")]
    if origin in (dict, typing.Dict) and isinstance(value, dict):  # noqa: UP006
        return [f for key, item in value.items() for f in _nested(arguments[1], item, f"{where}.{key}")]
    if arguments:  # Optional[...] / Union[...]
        return [f for argument in arguments if argument is not type(None) for f in _nested(argument, value, where)]
    return []


def _applications() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in sorted(EXAMPLES.glob("*.sparkapplication.yaml")):
        found.append((path.name, yaml.safe_load(path.read_text())))
    return found


@pytest.mark.parametrize(("name", "document"), _applications())
def test_spark_applications_match_the_operators_schema_and_our_jobs(name: str, document: dict[str, Any]) -> None:
    application = SparkV1beta2SparkApplication.from_dict(document)  # types and required fields
    assert application is not None and application.kind == "SparkApplication"
    assert _unknown_fields(SparkV1beta2SparkApplication, document) == [], name
    spec = document["spec"]
    script = spec["mainApplicationFile"].removeprefix(IMAGE_APP)
    assert spec["mainApplicationFile"].startswith(IMAGE_APP) and (ROOT / script).is_file(), script
    assert spec["driver"]["serviceAccount"] == "tidelog-spark"
    assert spec["image"].startswith("tidelog-spark:")
    if script.endswith("windowed_totals.py"):
        args = windowed_totals.parse_args(spec["arguments"])
        mounts = [mount["mountPath"] for mount in spec["driver"]["volumeMounts"]]
        assert any(args.checkpoint.startswith(mount + "/") for mount in mounts)  # the checkpoint outlives the pod


def test_a_misspelt_field_is_caught() -> None:
    (_, document), *_ = _applications()
    document["spec"]["driver"]["serviceAcount"] = "typo"
    assert _unknown_fields(SparkV1beta2SparkApplication, document) == [".spec.driver.serviceAcount"]
    document["spec"]["driver"].pop("serviceAcount")
    document["spec"]["executor"]["instances"] = "two"
    with pytest.raises(pydantic.ValidationError):
        SparkV1beta2SparkApplication.from_dict(document)


def test_the_spark_submit_job_is_valid_and_submits_a_job_of_ours() -> None:
    job = yaml.safe_load((EXAMPLES / "export-parquet.spark-submit.yaml").read_text())
    kubernetes_validate.validate(job, KUBERNETES, strict=True)
    pod = job["spec"]["template"]["spec"]
    command = pod["containers"][0]["command"]
    assert command[:2] == ["spark-submit", "--master"] and command[2].startswith("k8s://")
    confs = dict(command[i + 1].split("=", 1) for i, word in enumerate(command) if word == "--conf")
    assert confs["spark.kubernetes.authenticate.driver.serviceAccountName"] == pod["serviceAccountName"]
    application = next(word for word in command if word.startswith(IMAGE_APP))
    assert (ROOT / application.removeprefix(IMAGE_APP)).is_file()


def test_the_chart_gives_spark_drivers_an_account_that_can_run_executors() -> None:
    assert "tidelog/templates/spark.yaml" not in render() or not render()["tidelog/templates/spark.yaml"].strip()
    documents = [
        d for d in yaml.safe_load_all(render({"spark": {"enabled": True}})["tidelog/templates/spark.yaml"]) if d
    ]
    kinds = {d["kind"]: d for d in documents}
    assert set(kinds) == {"ServiceAccount", "Role", "RoleBinding"}
    for document in documents:
        kubernetes_validate.validate(document, KUBERNETES, strict=True)
    (rule,) = kinds["Role"]["rules"]
    assert {"pods", "services", "configmaps"} <= set(rule["resources"])
    assert {"create", "delete", "watch"} <= set(rule["verbs"])
    assert kinds["RoleBinding"]["subjects"][0]["name"] == kinds["ServiceAccount"]["metadata"]["name"] == "tidelog-spark"


def test_the_image_runs_the_jobs_with_spark_and_java() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    stages = re.findall(r"^FROM \S+ AS (\S+)$", dockerfile, re.MULTILINE)
    assert stages == ["tidelog", "spark"]
    spark_stage = dockerfile.split("AS spark", 1)[1]
    assert "openjdk-17-jre-headless" in spark_stage and "scripts/install-image spark" in spark_stage
    assert "COPY spark_jobs" in spark_stage and "/opt/entrypoint.sh" in spark_stage
    entrypoint = (ROOT / "docker" / "spark-entrypoint.sh").read_text()
    for role in ("driver)", "executor)"):
        assert role in entrypoint
    assert "KubernetesExecutorBackend" in entrypoint and "--deploy-mode client" in entrypoint
    skaffold = yaml.safe_load((ROOT / "skaffold.yaml").read_text())
    targets = {artifact["image"]: artifact["docker"]["target"] for artifact in skaffold["build"]["artifacts"]}
    assert targets == {"tidelog": "tidelog", "tidelog-spark": "spark"}
