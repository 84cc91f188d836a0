"""The API server's rules for a CRD's schema, applied here so a CRD it would refuse never leaves the
generator (crds.py) and a test holds every CRD the chart ships to them.

Written from Kubernetes' apiextensions code and documentation: the structural-schema invariants of
KEP-1002 (`apiextensions-apiserver/pkg/apiserver/schema/validation.go`: a type at every specified
node, nothing but value validation inside `allOf`/`anyOf`/`oneOf`/`not`, the two int-or-string
patterns as the only exception, every field inside a junctor also specified outside, metadata
restricted to name and generateName), and the OpenAPI subset `validation.go` allows
(`additionalProperties` and `properties` mutually exclusive, no `uniqueItems`, `$ref`,
`patternProperties`, ...), list types and `x-kubernetes-*` consistency. Messages are the API
server's, with its field paths. CEL rules are compiled by `cel_rules.py`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any, Final

__all__ = ["violations"]

Schema = Mapping[str, Any]

ROOT, ITEM, FIELD = "root", "item", "field"
JUNCTORS: Final = ("allOf", "anyOf", "oneOf", "not")
INT_OR_STRING_ANY_OF: Final = [{"type": "integer"}, {"type": "string"}]
# Not in the OpenAPI subset a CRD may use (apiextensions validation.go).
FORBIDDEN_KEYWORDS: Final = (
    "$ref",
    "$schema",
    "id",
    "definitions",
    "patternProperties",
    "dependencies",
    "additionalItems",
)
# Inside a junctor: what only the structural part may say (ForbiddenGenerics / ForbiddenExtensions).
NESTED_FORBIDDEN: Final = {
    "type": "must be empty to be structural",
    "additionalProperties": "must be undefined to be structural",
    "default": "must be undefined to be structural",
    "title": "must be empty to be structural",
    "description": "must be empty to be structural",
    "x-kubernetes-preserve-unknown-fields": "must be false to be structural",
    "x-kubernetes-embedded-resource": "must be false to be structural",
    "x-kubernetes-int-or-string": "must be false to be structural",
    "x-kubernetes-list-map-keys": "must be empty to be structural",
    "x-kubernetes-list-type": "must be undefined to be structural",
}


def violations(crd: Mapping[str, Any]) -> list[str]:
    """What the API server would refuse in a CustomResourceDefinition (apiextensions.k8s.io/v1),
    sorted; empty when it would accept it."""
    found: list[str] = []
    for index, version in enumerate(crd.get("spec", {}).get("versions", [])):
        path = f"spec.versions[{index}].schema.openAPIV3Schema"
        schema = version.get("schema", {}).get("openAPIV3Schema")
        if schema is None:
            found.append(f"{path}: Required value: schemas are required")
            continue
        found += _structural(schema, ROOT, path)
        found += _openapi_subset(schema, path)
        found += _completeness(schema, path)
    return sorted(found)


def _is_int_or_string_any_of(schema: Schema) -> bool:
    return schema.get("anyOf") == INT_OR_STRING_ANY_OF


def _is_int_or_string_all_of(schema: Schema) -> bool:
    all_of = schema.get("allOf") or []
    return bool(all_of) and all_of[0].get("anyOf") == INT_OR_STRING_ANY_OF


def _structural(schema: Schema, level: str, path: str) -> list[str]:
    found: list[str] = []
    kind = schema.get("type", "")
    if kind == "array" and "items" not in schema:
        found.append(f"{path}.items: Required value: must be specified")
    if "items" in schema:
        found += _structural(schema["items"], ITEM, f"{path}.items")
    for name, child in schema.get("properties", {}).items():
        found += _structural(child, FIELD, f"{path}.properties[{name}]")
    additional = schema.get("additionalProperties")
    if additional is not None:
        if level == ROOT:
            found.append(f"{path}.additionalProperties: Forbidden: must not be used at the root")
        if isinstance(additional, Mapping):
            found += _structural(additional, FIELD, f"{path}.additionalProperties")
    int_or_string = schema.get("x-kubernetes-int-or-string") is True
    preserve = schema.get("x-kubernetes-preserve-unknown-fields") is True
    if int_or_string and preserve:
        found.append(
            f"{path}.x-kubernetes-preserve-unknown-fields: Invalid value: true: must be false if "
            "x-kubernetes-int-or-string is true"
        )
    if schema.get("x-kubernetes-preserve-unknown-fields") is False:
        found.append(f"{path}.x-kubernetes-preserve-unknown-fields: Invalid value: false: must be true or undefined")
    found += _junctors(
        schema,
        skip_any_of=_is_int_or_string_any_of(schema),
        skip_first_all_of=_is_int_or_string_all_of(schema),
        path=path,
    )
    if int_or_string and kind:
        found.append(f"{path}.type: Invalid value: {kind!r}: must be empty if x-kubernetes-int-or-string is true")
    if not kind and not int_or_string and not preserve:
        where = {ROOT: "at the root", ITEM: "for specified array items", FIELD: "for specified object fields"}[level]
        found.append(f"{path}.type: Required value: must not be empty {where}")
    if level == ROOT and kind and kind != "object":
        found.append(f"{path}.type: Invalid value: {kind!r}: must be object at the root")
    metadata = schema.get("properties", {}).get("metadata")
    if level == ROOT and metadata is not None:
        allowed = {"name", "generateName"}
        extra = {key for key in metadata if key not in ("type", "properties")} | (
            set(metadata.get("properties", {})) - allowed
        )
        if metadata.get("type", "object") != "object" or extra:
            found.append(
                f"{path}.properties[metadata]: Forbidden: must not specify anything other than name and "
                "generateName, but metadata is implicitly specified"
            )
    found += _list_type(schema, path)
    return found


def _junctors(schema: Schema, *, skip_any_of: bool, skip_first_all_of: bool, path: str) -> list[str]:
    found: list[str] = []
    if not skip_any_of:
        for index, branch in enumerate(schema.get("anyOf", [])):
            found += _nested(branch, f"{path}.anyOf[{index}]", skip_any_of=False)
    for index, branch in enumerate(schema.get("allOf", [])):
        found += _nested(branch, f"{path}.allOf[{index}]", skip_any_of=skip_first_all_of and index == 0)
    for index, branch in enumerate(schema.get("oneOf", [])):
        found += _nested(branch, f"{path}.oneOf[{index}]", skip_any_of=False)
    if "not" in schema:
        found += _nested(schema["not"], f"{path}.not", skip_any_of=False)
    pattern = schema.get("pattern")
    if pattern is not None:
        try:
            re.compile(pattern)
        except re.error as error:
            found.append(
                f"{path}.pattern: Invalid value: {pattern!r}: must be a valid regular expression, but isn't: {error}"
            )
    return found


def _nested(schema: Schema, path: str, *, skip_any_of: bool) -> list[str]:
    """A junctor's branch: value validation only."""
    found = _junctors(schema, skip_any_of=skip_any_of, skip_first_all_of=False, path=path)
    if "items" in schema:
        found += _nested(schema["items"], f"{path}.items", skip_any_of=False)
    for name, child in schema.get("properties", {}).items():
        found += _nested(child, f"{path}.properties[{name}]", skip_any_of=False)
    for keyword, message in NESTED_FORBIDDEN.items():
        if keyword in schema and schema[keyword] not in (False, "", [], None):
            found.append(f"{path}.{keyword}: Forbidden: {message}")
    if schema.get("nullable") is True:
        found.append(f"{path}.nullable: Forbidden: must be false to be structural")
    if "metadata" in schema.get("properties", {}):
        found.append(f"{path}.properties[metadata]: Forbidden: must not be specified in a nested context")
    return found


def _list_type(schema: Schema, path: str) -> list[str]:
    list_type = schema.get("x-kubernetes-list-type")
    keys = schema.get("x-kubernetes-list-map-keys")
    found: list[str] = []
    if list_type is None:
        if keys:
            found.append(
                f"{path}.x-kubernetes-list-map-keys: Forbidden: must be empty if x-kubernetes-list-type is not map"
            )
        return found
    if schema.get("type") != "array":
        found.append(f"{path}.x-kubernetes-list-type: Invalid value: {list_type!r}: must only be used if type is array")
    items = schema.get("items", {})
    if list_type == "map":
        if not keys:
            found.append(
                f"{path}.x-kubernetes-list-map-keys: Required value: must not be empty if x-kubernetes-list-type is map"
            )
        if items.get("type") != "object":
            found.append(
                f"{path}.items.type: Invalid value: {items.get('type')!r}: must be object for an array of list-type map"
            )
        for key in keys or ():
            field = items.get("properties", {}).get(key)
            if field is None:
                found.append(
                    f"{path}.x-kubernetes-list-map-keys: Invalid value: {key!r}: "
                    "entries must all be names of item properties"
                )
            elif key not in items.get("required", []) and "default" not in field:
                found.append(
                    f"{path}.items.properties[{key}]: Required value: "
                    "all map keys must be required or have a default value"
                )
    elif list_type == "set":
        if items.get("type") not in ("string", "integer", "number", "boolean") and not (
            items.get("type") == "object" and items.get("x-kubernetes-map-type") == "atomic"
        ):
            found.append(
                f"{path}.items.type: Invalid value: {items.get('type')!r}: "
                "must be a scalar type if x-kubernetes-list-type is set"
            )
    elif list_type != "atomic":
        found.append(
            f'{path}.x-kubernetes-list-type: Unsupported value: {list_type!r}: supported values: "atomic", "map", "set"'
        )
    return found


def _walk(schema: Schema, path: str) -> Iterator[tuple[Schema, str]]:
    yield schema, path
    if isinstance(schema.get("items"), Mapping):
        yield from _walk(schema["items"], f"{path}.items")
    for name, child in schema.get("properties", {}).items():
        yield from _walk(child, f"{path}.properties[{name}]")
    if isinstance(schema.get("additionalProperties"), Mapping):
        yield from _walk(schema["additionalProperties"], f"{path}.additionalProperties")
    for junctor in ("allOf", "anyOf", "oneOf"):
        for index, branch in enumerate(schema.get(junctor, [])):
            yield from _walk(branch, f"{path}.{junctor}[{index}]")
    if "not" in schema:
        yield from _walk(schema["not"], f"{path}.not")


def _openapi_subset(schema: Schema, path: str) -> list[str]:
    found: list[str] = []
    for node, where in _walk(schema, path):
        for keyword in FORBIDDEN_KEYWORDS:
            if keyword in node:
                found.append(f"{where}.{keyword}: Forbidden: {keyword} is not supported")
        if node.get("uniqueItems") is True:
            found.append(
                f"{where}.uniqueItems: Forbidden: "
                "uniqueItems cannot be set to true since the runtime complexity becomes quadratic"
            )
        if "additionalProperties" in node and node.get("properties") and node["additionalProperties"] is not True:
            found.append(
                f"{where}.additionalProperties: Forbidden: additionalProperties and properties are mutual exclusive"
            )
    return found


def _completeness(schema: Schema, path: str) -> list[str]:
    """Every field or item a junctor names is specified outside it too."""
    found: list[str] = []

    def covered(structure: Schema, nested: Schema, where: str) -> None:
        for name, child in nested.get("properties", {}).items():
            outside = structure.get("properties", {}).get(name)
            if outside is None:
                found.append(f"{where}.properties[{name}]: Required value: because it is defined in {where}")
            else:
                covered(outside, child, f"{where}.properties[{name}]")
        if "items" in nested:
            if "items" not in structure:
                found.append(f"{where}.items: Required value: because it is defined in {where}")
            else:
                covered(structure["items"], nested["items"], f"{where}.items")
        for junctor in ("allOf", "anyOf", "oneOf"):
            for branch in nested.get(junctor, []):
                covered(structure, branch, where)
        if "not" in nested:
            covered(structure, nested["not"], where)

    for node, where in _walk(schema, path):
        for junctor in ("allOf", "anyOf", "oneOf"):
            for branch in node.get(junctor, []):
                covered(node, branch, where)
        if "not" in node:
            covered(node, node["not"], where)
    return found
