"""The `Topic`, `ConsumerGroup` and `User` CustomResourceDefinitions (API group `tidelog.io`, `v1beta1`).

Defined here once and written to `helm/tidelog/crds/` by `python -m tidelog.operator.crds`; a test
fails when the files are stale, and `render` refuses a CRD the API server would
(structural_schema.py). `spec.config` is generated from the config registry
(`tidelog.common.config.LOG_CONFIGS`): each known config with its type (integers as numbers or
strings, Kubernetes' int-or-string: Kafka's configs are strings; doubles as numbers, booleans as
booleans, lists as comma-separated strings, choices as enums). A structural schema cannot both list
properties and close the object, nor bound an int-or-string, so unknown configs are kept (not
pruned) and the bounds are the operator's: both end as the Topic's `InvalidConfig` condition, as
Kafka's CreateTopics refuses them.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Final

import yaml

from tidelog.common.config import INT_MAX, LOG_CONFIGS, LONG_MAX, ConfigDef, ConfigType
from tidelog.common.security.authorization.acl import Operation
from tidelog.operator.structural_schema import violations

__all__ = [
    "CONSUMER_GROUP_CRD",
    "CRD_FILES",
    "FINALIZED_CRDS",
    "GROUP",
    "TIDELOG_USER_CRD",
    "TOPIC_CRD",
    "USER_CRD",
    "VERSION",
    "render",
]

GROUP: Final = "tidelog.io"
VERSION: Final = "v1beta1"
TOPIC_NAME_PATTERN: Final = r"^[a-zA-Z0-9._-]{1,249}$"  # Kafka's legal topic names
PARTITIONS_MAX: Final = 10_000  # the controller's partitions-per-topic limit
REPLICAS_MAX: Final = 100

Schema = dict[str, Any]


def _config_schema(definition: ConfigDef) -> Schema:
    bounds: Schema = {}
    if definition.minimum is not None:
        bounds["minimum"] = definition.minimum
    if definition.maximum is not None and definition.maximum not in (LONG_MAX, INT_MAX):
        bounds["maximum"] = definition.maximum
    described: Schema = {"description": definition.doc}
    match definition.type:
        case ConfigType.INT | ConfigType.LONG:
            # Exactly Kubernetes' int-or-string: nothing else may stand in its branches.
            return described | {"x-kubernetes-int-or-string": True, "anyOf": [{"type": "integer"}, {"type": "string"}]}
        case ConfigType.DOUBLE:
            return described | {"type": "number", **bounds}
        case ConfigType.BOOLEAN:
            return described | {"type": "boolean"}
        case ConfigType.LIST:
            choices = "|".join(definition.choices or ())
            pattern = rf"^\s*({choices})\s*(,\s*({choices})\s*)*$" if choices else None
            return described | {"type": "string", **({"pattern": pattern} if pattern else {})}
        case ConfigType.STRING:
            return described | {"type": "string", **({"enum": list(definition.choices)} if definition.choices else {})}
    raise AssertionError(definition.type)


def _condition_schema() -> Schema:
    return {
        "type": "object",
        "required": ["type", "status"],
        "properties": {
            "type": {"type": "string"},
            "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
            "reason": {"type": "string"},
            "message": {"type": "string"},
            "lastTransitionTime": {"type": "string", "format": "date-time"},
            "observedGeneration": {"type": "integer"},
        },
    }


def _status_common() -> Schema:
    return {
        "observedGeneration": {"type": "integer"},
        "conditions": {
            "type": "array",
            "items": _condition_schema(),
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["type"],
        },
    }


def _topic_spec() -> Schema:
    return {
        "type": "object",
        "required": ["partitions", "replicas"],
        "properties": {
            "partitions": {"type": "integer", "minimum": 1, "maximum": PARTITIONS_MAX},
            "replicas": {"type": "integer", "minimum": 1, "maximum": REPLICAS_MAX},
            "topicName": {
                "type": "string",
                "pattern": TOPIC_NAME_PATTERN,
                "description": "The topic's name in Tidelog (default: metadata.name); any legal Kafka name.",
                "x-kubernetes-validations": [
                    {"rule": "self == oldSelf", "message": "topicName cannot change: create another Topic"}
                ],
            },
            "config": {
                "type": "object",
                "description": "Topic configs by their Kafka names (docs/configuration.md); an unknown one "
                "or a value out of bounds is the InvalidConfig condition.",
                "x-kubernetes-preserve-unknown-fields": True,
                "properties": {definition.name: _config_schema(definition) for definition in LOG_CONFIGS},
            },
            "assignment": {
                "type": "array",
                "description": "Replicas of each partition by broker id, the preferred leader first.",
                "maxItems": PARTITIONS_MAX,
                "items": {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": REPLICAS_MAX,
                    "items": {"type": "integer", "minimum": 0},
                    "x-kubernetes-list-type": "set",
                },
            },
            "deletionPolicy": {"type": "string", "enum": ["Delete", "Retain"], "default": "Delete"},
        },
        "x-kubernetes-validations": [
            {
                "rule": "!has(self.assignment) || size(self.assignment) == self.partitions",
                "message": "assignment must list every partition",
            },
            {
                "rule": "!has(self.assignment) || self.assignment.all(replicas, size(replicas) == self.replicas)",
                "message": "each partition's assignment must list `replicas` brokers",
            },
        ],
    }


def _topic_status() -> Schema:
    return {
        "type": "object",
        "properties": _status_common()
        | {
            "topicName": {"type": "string"},
            "topicId": {"type": "string"},
            "partitions": {"type": "integer"},
            "replicas": {"type": "integer"},
            "underReplicatedPartitions": {"type": "integer"},
            "offlinePartitions": {"type": "integer"},
            "reassignment": {
                "type": "object",
                "description": "A replica change under way: the partitions moving and how many are done.",
                "properties": {
                    "partitions": {"type": "integer"},
                    "done": {"type": "integer"},
                    "moving": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {
                                "partition": {"type": "integer"},
                                "adding": {"type": "array", "items": {"type": "integer"}},
                                "removing": {"type": "array", "items": {"type": "integer"}},
                            },
                        },
                    },
                },
            },
        },
    }


def _group_spec() -> Schema:
    return {
        "type": "object",
        "properties": {
            "groupId": {
                "type": "string",
                "minLength": 1,
                "maxLength": 1024,
                "description": "The consumer group's id (default: metadata.name).",
                "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "groupId cannot change"}],
            },
            "resetOffsets": {
                "type": "object",
                "description": "Applied once per `id`, and only while the group has no members (Kafka's rule).",
                "required": ["id", "to"],
                "properties": {
                    "id": {"type": "string", "minLength": 1, "maxLength": 253},
                    "to": {"type": "string", "enum": ["earliest", "latest", "timestamp", "offset"]},
                    "timestamp": {"type": "integer", "minimum": 0, "description": "ms since the epoch"},
                    "offsets": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "required": ["topic", "partition", "offset"],
                            "properties": {
                                "topic": {"type": "string", "pattern": TOPIC_NAME_PATTERN},
                                "partition": {"type": "integer", "minimum": 0},
                                "offset": {"type": "integer", "minimum": 0},
                            },
                        },
                    },
                    "topics": {"type": "array", "items": {"type": "string", "pattern": TOPIC_NAME_PATTERN}},
                },
                "x-kubernetes-validations": [
                    {
                        "rule": "self.to != 'timestamp' || has(self.timestamp)",
                        "message": "to: timestamp needs timestamp",
                    },
                    {"rule": "self.to != 'offset' || has(self.offsets)", "message": "to: offset needs offsets"},
                ],
            },
        },
    }


def _group_status() -> Schema:
    partition_lag = {
        "type": "object",
        "properties": {
            "topic": {"type": "string"},
            "partition": {"type": "integer"},
            "committed": {"type": "integer"},
            "end": {"type": "integer"},
            "lag": {"type": "integer"},
        },
    }
    member = {
        "type": "object",
        "properties": {
            "memberId": {"type": "string"},
            "clientId": {"type": "string"},
            "host": {"type": "string"},
            "groupInstanceId": {"type": "string"},
            "partitions": {"type": "array", "items": {"type": "string"}},
        },
    }
    return {
        "type": "object",
        "properties": _status_common()
        | {
            "groupId": {"type": "string"},
            "state": {"type": "string"},
            "generation": {"type": "integer"},
            "protocol": {"type": "string"},
            "memberCount": {"type": "integer"},
            "members": {"type": "array", "items": member},
            "offsets": {"type": "array", "items": partition_lag},
            "lagByTopic": {"type": "object", "additionalProperties": {"type": "integer"}},
            "totalLag": {"type": "integer"},
            "lastReset": {"type": "string", "description": "The `id` of the last reset applied."},
        },
    }


def _user_spec() -> Schema:
    """Strimzi's KafkaUser spec: authentication, authorization (simple ACLs), quotas."""
    acl_rule = {
        "type": "object",
        "required": ["resource", "operations"],
        "properties": {
            "resource": {
                "type": "object",
                "required": ["type"],
                "properties": {
                    "type": {"type": "string", "enum": ["topic", "group", "cluster"]},
                    "name": {"type": "string", "minLength": 1, "maxLength": 1024},
                    "patternType": {"type": "string", "enum": ["literal", "prefix"], "default": "literal"},
                },
                "x-kubernetes-validations": [
                    {
                        "rule": "self.type == 'cluster' || has(self.name)",
                        "message": "topic and group resources need a name",
                    }
                ],
            },
            "operations": {
                "type": "array",
                "minItems": 1,
                "items": {
                    "type": "string",
                    "enum": [operation.value for operation in Operation],
                },
            },
            "host": {"type": "string", "default": "*"},
            "type": {"type": "string", "enum": ["allow", "deny"], "default": "allow"},
        },
    }
    return {
        "type": "object",
        "properties": {
            "authentication": {
                "type": "object",
                "required": ["type"],
                "properties": {"type": {"type": "string", "enum": ["tls", "scram-sha-512"]}},
                "description": "tls: a client certificate in a Secret named after the user; scram-sha-512: a password.",
            },
            "authorization": {
                "type": "object",
                "required": ["type"],
                "properties": {
                    "type": {"type": "string", "enum": ["simple"]},
                    "acls": {"type": "array", "maxItems": 1000, "items": acl_rule},
                },
            },
            "quotas": {
                "type": "object",
                "properties": {
                    "producerByteRate": {"type": "integer", "minimum": 1},
                    "consumerByteRate": {"type": "integer", "minimum": 1},
                    "requestPercentage": {"type": "integer", "minimum": 1},
                },
            },
        },
    }


def _user_status() -> Schema:
    return {
        "type": "object",
        "properties": _status_common()
        | {
            "username": {"type": "string"},
            "principal": {"type": "string"},
            "secret": {"type": "string", "description": "The Secret with the user's credentials."},
        },
    }


def _crd(
    kind: str, plural: str, short_names: list[str], *, spec: Schema, status: Schema, columns: list[Schema]
) -> Schema:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}", "labels": {"app.kubernetes.io/part-of": "tidelog"}},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
                "shortNames": short_names,
                "categories": ["tidelog"],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": columns,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "required": ["spec"],
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": {"type": "object"},
                                "spec": spec,
                                "status": status,
                            },
                        }
                    },
                }
            ],
        },
    }


def _column(name: str, path: str, kind: str = "string") -> Schema:
    return {"name": name, "type": kind, "jsonPath": path}


READY: Final = '.status.conditions[?(@.type=="Ready")].status'

TOPIC_CRD: Final = _crd(
    "Topic",
    "topics",
    ["tlt"],
    spec=_topic_spec(),
    status=_topic_status(),
    columns=[
        _column("Partitions", ".spec.partitions", "integer"),
        _column("Replicas", ".spec.replicas", "integer"),
        _column("Ready", READY),
        _column("Age", ".metadata.creationTimestamp", "date"),
    ],
)
CONSUMER_GROUP_CRD: Final = _crd(
    "ConsumerGroup",
    "consumergroups",
    ["tlcg"],
    spec=_group_spec(),
    status=_group_status(),
    columns=[
        _column("State", ".status.state"),
        _column("Members", ".status.memberCount", "integer"),
        _column("Lag", ".status.totalLag", "integer"),
        _column("Age", ".metadata.creationTimestamp", "date"),
    ],
)

_USER_COLUMNS: Final = [
    _column("Authentication", ".spec.authentication.type"),
    _column("Principal", ".status.principal"),
    _column("Ready", READY),
    _column("Age", ".metadata.creationTimestamp", "date"),
]
# A Kafka user of Tidelog's (Strimzi's KafkaUser). Not `User`: OpenShift's users.user.openshift.io
# takes `kubectl get users` there.
TIDELOG_USER_CRD: Final = _crd(
    "TidelogUser", "tidelogusers", ["tlu"], spec=_user_spec(), status=_user_status(), columns=_USER_COLUMNS
)
# The kind's first name, served (and reconciled) for one more release, deprecated.
USER_CRD: Final = _crd("User", "users", [], spec=_user_spec(), status=_user_status(), columns=_USER_COLUMNS)
USER_CRD["spec"]["versions"][0] |= {
    "deprecated": True,
    "deprecationWarning": "tidelog.io/v1beta1 User is deprecated (it collides with OpenShift's users); use TidelogUser",
}

# kopf's own resource, where operator replicas meet (kopf peering: the highest priority acts), as
# kopf's documentation defines it; installed with ours so that `operator.replicas > 1` works.
KOPF_PEERING_CRD: Final = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "clusterkopfpeerings.kopf.dev"},
    "spec": {
        "scope": "Cluster",
        "group": "kopf.dev",
        "names": {"kind": "ClusterKopfPeering", "plural": "clusterkopfpeerings", "singular": "clusterkopfpeering"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {"status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
                    }
                },
            }
        ],
    },
}

# The kinds the operator puts its finalizer on (each has a delete handler in main.py); the chart's
# pre-delete hook releases them all (finalizers.py).
FINALIZED_CRDS: Final = (TOPIC_CRD, CONSUMER_GROUP_CRD, TIDELOG_USER_CRD, USER_CRD)

CRD_FILES: Final = {
    "topics.tidelog.io.yaml": TOPIC_CRD,
    "consumergroups.tidelog.io.yaml": CONSUMER_GROUP_CRD,
    "tidelogusers.tidelog.io.yaml": TIDELOG_USER_CRD,
    "users.tidelog.io.yaml": USER_CRD,
    "clusterkopfpeerings.kopf.dev.yaml": KOPF_PEERING_CRD,
}


def render(crd: Schema) -> str:
    refused = violations(crd)
    if refused:
        raise ValueError(f"{crd['metadata']['name']}: the API server would refuse it:\n" + "\n".join(refused))
    header = "# Generated by `python -m tidelog.operator.crds` from operator/crds.py: do not edit.\n"
    return header + yaml.safe_dump(crd, sort_keys=False, width=120)


def main(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name, crd in CRD_FILES.items():
        (directory / name).write_text(render(crd))


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("helm/tidelog/crds"))
