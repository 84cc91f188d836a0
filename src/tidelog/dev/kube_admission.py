"""What the API server does to a custom resource before it stores it, for the emulator
(kube_emulator.py): unknown fields pruned (structural schemas, KEP-1002), defaults applied, the
schema's value validation (OpenAPI v3 as JSON Schema) and its CEL rules
(`x-kubernetes-validations`, with `oldSelf` for transition rules on an update) checked, and the
status subresource's split: a write to the resource leaves `status` as it was, a write to
`/status` changes nothing else.

CEL rules run on cel-python, the CEL of Kubernetes' own rules (its standard macros and functions;
Kubernetes' extension libraries, lists and strings, are not all there: rules using them would
fail here first).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import celpy
import jsonschema  # type: ignore[import-untyped]  # (a test dependency without stubs)
from celpy.adapter import json_to_cel

__all__ = ["Admission", "RefusedError"]

Schema = Mapping[str, Any]
ROOT_FIELDS = ("apiVersion", "kind", "metadata")


class RefusedError(ValueError):
    """The API server's 422 Invalid: the messages it would give."""

    def __init__(self, causes: list[str]) -> None:
        super().__init__("; ".join(causes))
        self.causes = causes


def _prune(value: Any, schema: Schema) -> Any:
    if isinstance(value, dict):
        if schema.get("x-kubernetes-preserve-unknown-fields") or schema.get("x-kubernetes-embedded-resource"):
            known = schema.get("properties", {})
            return {k: _prune(v, known[k]) if k in known else v for k, v in value.items()}
        if "properties" in schema:
            return {k: _prune(v, schema["properties"][k]) for k, v in value.items() if k in schema["properties"]}
        if isinstance(schema.get("additionalProperties"), Mapping):
            return {k: _prune(v, schema["additionalProperties"]) for k, v in value.items()}
        return value if schema.get("type") != "object" or "additionalProperties" in schema else {}
    if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        return [_prune(item, schema["items"]) for item in value]
    return value


def _default(value: Any, schema: Schema) -> Any:
    if isinstance(value, dict):
        for name, child in schema.get("properties", {}).items():
            if name not in value and "default" in child:
                value[name] = copy.deepcopy(child["default"])
            if name in value:
                value[name] = _default(value[name], child)
    elif isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        return [_default(item, schema["items"]) for item in value]
    return value


class Admission:
    """One CRD version's schema, applied as the API server applies it."""

    def __init__(self, schema: Schema, *, status_subresource: bool) -> None:
        self.schema = schema
        self.status_subresource = status_subresource
        self._validator = jsonschema.Draft7Validator(schema)
        self._cel = celpy.Environment()
        self._programs: dict[str, Any] = {}

    def admit(self, new: dict[str, Any], old: dict[str, Any] | None, subresource: str | None) -> dict[str, Any]:
        """The object as stored: `new` (a create's body, or an update's result) pruned, defaulted,
        split by subresource and checked; RefusedError with the API server's reasons otherwise."""
        body = {key: new[key] for key in ROOT_FIELDS if key in new}
        body |= {k: v for k, v in _prune(new, self.schema).items() if k not in ROOT_FIELDS}
        if self.status_subresource:
            if subresource == "status":
                assert old is not None, "a status write updates an object"
                body = {**{k: v for k, v in old.items() if k != "status"}, "metadata": body["metadata"]} | (
                    {"status": body["status"]} if "status" in body else {}
                )
            elif old is not None:
                kept = {"status": old["status"]} if "status" in old else {}
                body = {k: v for k, v in body.items() if k != "status"} | kept
            else:
                body.pop("status", None)  # a create's status is dropped
        body = _default(body, self.schema)
        causes = [
            f"{'.'.join(map(str, error.absolute_path)) or '<root>'}: {error.message}"
            for error in self._validator.iter_errors(body)
        ]
        causes += self._rules(body, old, self.schema, "")
        if causes:
            raise RefusedError(sorted(causes))
        admitted: dict[str, Any] = body
        return admitted

    def _rules(self, value: Any, old: Any, schema: Schema, path: str) -> list[str]:
        causes: list[str] = []
        for rule in schema.get("x-kubernetes-validations", ()):
            transition = "oldSelf" in rule["rule"]
            if transition and old is None:
                continue  # a transition rule checks updates only
            program = self._programs.get(rule["rule"])
            if program is None:
                program = self._programs[rule["rule"]] = self._cel.program(self._cel.compile(rule["rule"]))
            activation = {"self": json_to_cel(value)}
            if transition:
                activation["oldSelf"] = json_to_cel(old)
            result = program.evaluate(activation)
            if not (isinstance(result, celpy.celtypes.BoolType) and bool(result)):
                causes.append(f"{path or '<root>'}: {rule.get('message') or 'failed rule: ' + rule['rule']}")
        if isinstance(value, dict):
            for name, child in schema.get("properties", {}).items():
                if name in value:
                    previous = old.get(name) if isinstance(old, dict) else None
                    causes += self._rules(value[name], previous, child, f"{path}.{name}" if path else name)
        return causes
