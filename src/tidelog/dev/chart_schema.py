"""The chart's `values.schema.json`, where it says what settings are: each component's `config`
map (Kafka-named settings, as Strimzi's `spec.kafka.config`) is generated from the settings
registry, so Helm refuses an unknown name, a value of the wrong type or one out of bounds before
anything is deployed. The rest of the schema (ports, replicas, security) is written by hand in
the same file; this rewrites only the `config` entries.

`python -m tidelog.dev.chart_schema` writes it; tests/layout checks that it is fresh.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Final

from tidelog.common.config import ALL_CONFIGS, ConfigDef, ConfigScope, ConfigType

__all__ = ["CHART_MANAGED", "COMPONENTS", "SCHEMA", "config_schema", "configurable", "with_config_schemas"]

SCHEMA: Final = Path(__file__).resolve().parents[3] / "helm" / "tidelog" / "values.schema.json"
# The chart's components and the settings scope each one's process takes.
COMPONENTS: Final = {
    "controller": ConfigScope.CONTROLLER,
    "broker": ConfigScope.BROKER,
    "coordinator": ConfigScope.COORDINATOR,
    "gateway": ConfigScope.GATEWAY,
    "operator": ConfigScope.OPERATOR,
}
# Settings the chart itself sets from other values (the gateway's TLS and logins follow
# `security.*`; the broker's readiness file is what its readiness probe reads): left out of
# `config`, so a value there is refused rather than silently overridden.
CHART_MANAGED: Final = {
    # (listeners: each pod's own advertised address; the chart does not open a Kafka port yet)
    "broker": frozenset({"broker.readiness.file", "listeners", "advertised.listeners"}),
    "gateway": frozenset(
        {"authentication.method", "rest.ssl.certificate.location", "rest.ssl.key.location", "rest.ssl.ca.location"}
    ),
}
_JSON_TYPES: Final = {
    ConfigType.INT: "integer",
    ConfigType.LONG: "integer",
    ConfigType.DOUBLE: "number",
    ConfigType.BOOLEAN: "boolean",
    ConfigType.STRING: "string",
}


def _setting_schema(definition: ConfigDef) -> dict[str, Any]:
    schema: dict[str, Any] = {"description": definition.doc}
    if definition.type is ConfigType.LIST:
        item: dict[str, Any] = {"type": "string"}
        if definition.choices is not None:
            item["enum"] = list(definition.choices)
        # "a,b" as on the command line, or a YAML list
        schema["oneOf"] = [{"type": "string"}, {"type": "array", "items": item, "minItems": 1}]
        return schema
    schema["type"] = _JSON_TYPES[definition.type]
    if definition.minimum is not None:
        schema["minimum"] = definition.minimum
    if definition.maximum is not None:
        schema["maximum"] = definition.maximum
    if definition.choices is not None:
        schema["enum"] = list(definition.choices)
    return schema


def configurable(component: str) -> list[ConfigDef]:
    """The settings a component's `config` map takes: its scope's, but those the chart sets."""
    managed = CHART_MANAGED.get(component, frozenset())
    scope = COMPONENTS[component]
    return [definition for definition in ALL_CONFIGS if definition.scope is scope and definition.name not in managed]


def config_schema(component: str) -> dict[str, Any]:
    """The `config` map of a component, each setting checked as the registry does."""
    scope = COMPONENTS[component]
    definitions = configurable(component)
    return {
        "type": "object",
        "description": f"{scope.value} settings by their names (docs/configuration.md); generated from the registry",
        "additionalProperties": False,
        "properties": {definition.name: _setting_schema(definition) for definition in definitions},
    }


def with_config_schemas(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` with every component's `config` entry generated anew."""
    for component in COMPONENTS:
        schema["properties"][component]["properties"]["config"] = config_schema(component)
    return schema


def rendered(schema: dict[str, Any]) -> str:
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def main() -> None:
    schema = with_config_schemas(json.loads(SCHEMA.read_text()))
    SCHEMA.write_text(rendered(schema))
    print(f"wrote {SCHEMA}", file=sys.stderr)


if __name__ == "__main__":
    main()
