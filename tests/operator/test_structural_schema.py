"""The API server's CRD rules (operator/structural_schema.py): every CRD the chart ships passes,
and each form a real API server refuses is refused here with the API server's message, the Topic
CRD's two of issue 30 first."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from tidelog.operator.crds import CRD_FILES, TOPIC_CRD, render
from tidelog.operator.structural_schema import violations

ROOT = Path(__file__).resolve().parents[2]
PATH = "spec.versions[0].schema.openAPIV3Schema"


def _crd(schema: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "things.example.io"},
        "spec": {"versions": [{"name": "v1", "schema": {"openAPIV3Schema": schema}}]},
    }


def _object(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties}


@pytest.mark.parametrize("path", sorted((ROOT / "helm" / "tidelog" / "crds").glob("*.yaml")), ids=lambda p: p.name)
def test_every_crd_the_chart_ships_is_one_an_api_server_accepts(path: Path) -> None:
    assert violations(yaml.safe_load(path.read_text())) == []


def test_the_topic_crd_before_issue_30_is_refused_for_both_reasons() -> None:
    old = copy.deepcopy(TOPIC_CRD)
    config = old["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["config"]
    config.pop("x-kubernetes-preserve-unknown-fields")
    config["additionalProperties"] = False
    config["properties"]["retention.ms"] = {
        "x-kubernetes-int-or-string": True,
        "anyOf": [{"type": "integer", "minimum": -1}, {"type": "string", "pattern": "^-?[0-9]+$"}],
    }
    where = f"{PATH}.properties[spec].properties[config]"
    assert violations(old) == [
        f"{where}.additionalProperties: Forbidden: additionalProperties and properties are mutual exclusive",
        f"{where}.properties[retention.ms].anyOf[0].type: Forbidden: must be empty to be structural",
        f"{where}.properties[retention.ms].anyOf[1].type: Forbidden: must be empty to be structural",
    ]
    with pytest.raises(ValueError, match="the API server would refuse it"):
        render(old)


@pytest.mark.parametrize(
    ("schema", "refusal"),
    [
        ({"type": "string"}, f"{PATH}.type: Invalid value: 'string': must be object at the root"),
        ({"properties": {}}, f"{PATH}.type: Required value: must not be empty at the root"),
        (_object(a={}), f"{PATH}.properties[a].type: Required value: must not be empty for specified object fields"),
        (_object(a={"type": "array"}), f"{PATH}.properties[a].items: Required value: must be specified"),
        (
            _object(a={"type": "array", "items": {}}),
            f"{PATH}.properties[a].items.type: Required value: must not be empty for specified array items",
        ),
        (
            _object(a={"type": "string", "anyOf": [{"type": "string", "description": "d"}]}),
            f"{PATH}.properties[a].anyOf[0].description: Forbidden: must be empty to be structural",
        ),
        (
            _object(a={"x-kubernetes-int-or-string": True, "anyOf": [{"type": "integer"}]}),
            f"{PATH}.properties[a].anyOf[0].type: Forbidden: must be empty to be structural",
        ),
        (
            _object(a={"x-kubernetes-int-or-string": True, "type": "string"}),
            f"{PATH}.properties[a].type: Invalid value: 'string': must be empty if x-kubernetes-int-or-string is true",
        ),
        (
            _object(a={"type": "object", "anyOf": [{"properties": {"b": {"minimum": 1}}}]}),
            f"{PATH}.properties[a].properties[b]: Required value: because it is defined in {PATH}.properties[a]",
        ),
        (
            _object(a={"type": "object", "allOf": [{"nullable": True}]}),
            f"{PATH}.properties[a].allOf[0].nullable: Forbidden: must be false to be structural",
        ),
        (
            _object(
                a={
                    "type": "object",
                    "additionalProperties": {"type": "string"},
                    "properties": {"b": {"type": "string"}},
                }
            ),
            f"{PATH}.properties[a].additionalProperties: Forbidden: "
            "additionalProperties and properties are mutual exclusive",
        ),
        (
            _object(a={"type": "array", "items": {"type": "string"}, "uniqueItems": True}),
            f"{PATH}.properties[a].uniqueItems: Forbidden: "
            "uniqueItems cannot be set to true since the runtime complexity becomes quadratic",
        ),
        (_object(a={"$ref": "#/definitions/b"}), f"{PATH}.properties[a].$ref: Forbidden: $ref is not supported"),
        (
            _object(metadata={"type": "object", "properties": {"labels": {"type": "object"}}}),
            f"{PATH}.properties[metadata]: Forbidden: must not specify anything other than name and generateName, "
            "but metadata is implicitly specified",
        ),
        (
            _object(
                a={
                    "type": "array",
                    "items": {"type": "object", "properties": {"k": {"type": "string"}}},
                    "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["k"],
                }
            ),
            f"{PATH}.properties[a].items.properties[k]: Required value: "
            "all map keys must be required or have a default value",
        ),
        (
            _object(a={"type": "string", "pattern": "(unclosed"}),
            f"{PATH}.properties[a].pattern: Invalid value: '(unclosed': must be a valid regular expression",
        ),
    ],
)
def test_each_form_an_api_server_refuses_is_refused(schema: dict[str, Any], refusal: str) -> None:
    found = violations(_crd(schema))
    assert any(problem.startswith(refusal) for problem in found), found


def test_the_two_int_or_string_patterns_and_preserved_objects_are_accepted() -> None:
    schema = _object(
        a={"x-kubernetes-int-or-string": True, "anyOf": [{"type": "integer"}, {"type": "string"}]},
        b={
            "x-kubernetes-int-or-string": True,
            "allOf": [{"anyOf": [{"type": "integer"}, {"type": "string"}]}, {"maxLength": 5}],
        },
        c={"type": "object", "x-kubernetes-preserve-unknown-fields": True, "properties": {"d": {"type": "integer"}}},
        e={
            "type": "object",
            "anyOf": [{"required": ["f"]}, {"required": ["g"]}],
            "properties": {"f": {"type": "string"}, "g": {"type": "string"}},
        },
    )
    assert violations(_crd(schema)) == []


def test_every_generated_crd_renders() -> None:
    for crd in CRD_FILES.values():
        assert render(crd)
