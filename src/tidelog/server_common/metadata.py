"""Tidelog's metadata in etcd: the key layout and the JSON records under each key.

Defined once here; docs/metadata.md explains it. Writers: brokers write only their own
registration and claim producer-id blocks (compare-and-swap on one counter); everything else is
written by the active controller in transactions fenced by its election key
(tidelog.server_common.etcd.election). Values are JSON objects, one record type per key kind.
"""

from __future__ import annotations

import dataclasses
import json
import re
import zlib
from collections.abc import Sequence
from typing import Any, Final, Self

from tidelog.common.errors import InvalidTopicError

__all__ = [
    "ACLS_PREFIX",
    "BROKERS_PREFIX",
    "CONSUMER_OFFSETS_TOPIC",
    "CONTROLLER_ELECTION_PREFIX",
    "CONTROLLER_EPOCH_KEY",
    "COORDINATOR_INSTANCES_PREFIX",
    "COORDINATOR_PARTITIONS_PREFIX",
    "PRODUCER_ID_BLOCK_KEY",
    "QUOTAS_PREFIX",
    "SCRAM_CREDENTIALS_PREFIX",
    "TOPICS_PREFIX",
    "TRANSACTION_STATE_TOPIC",
    "TXN_COORDINATOR_PARTITIONS_PREFIX",
    "BrokerRegistration",
    "ControllerRecord",
    "CoordinatorClaimRecord",
    "CoordinatorInstanceRecord",
    "PartitionStateRecord",
    "ProducerIdBlockRecord",
    "TopicRecord",
    "broker_key",
    "coordinator_claim_key",
    "coordinator_epoch_key",
    "coordinator_owner_of",
    "offsets_partition_for",
    "parse_topics_key",
    "partition_state_key",
    "scram_credential_key",
    "topic_key",
    "validate_topic_name",
]

ROOT: Final = "/tidelog"
BROKERS_PREFIX: Final = f"{ROOT}/brokers/ids/"
CONTROLLER_ELECTION_PREFIX: Final = f"{ROOT}/controller/election"
CONTROLLER_EPOCH_KEY: Final = f"{ROOT}/controller/epoch"
TOPICS_PREFIX: Final = f"{ROOT}/topics/"
PRODUCER_ID_BLOCK_KEY: Final = f"{ROOT}/producer-ids/block"
COORDINATOR_INSTANCES_PREFIX: Final = f"{ROOT}/coordinators/instances/"
COORDINATOR_PARTITIONS_PREFIX: Final = f"{ROOT}/coordinators/partitions/"
TXN_COORDINATOR_PARTITIONS_PREFIX: Final = f"{ROOT}/coordinators/transactions/"
GATEWAY_CONSUMERS_PREFIX: Final = f"{ROOT}/gateways/consumers/"
CLUSTER_ID_KEY: Final = f"{ROOT}/cluster/id"
ACLS_PREFIX: Final = (
    f"{ROOT}/security/acls/"  # one key per ACL binding (tidelog.server_common.security.authorization.acl_store)
)
SCRAM_CREDENTIALS_PREFIX: Final = f"{ROOT}/security/scram/"  # one key per user
# The cluster's secret for answering logins of users that do not exist like those of users that do
# (their salts and iteration counts): one value, created by the first process that needs it.
SCRAM_UNKNOWN_USER_SECRET_KEY: Final = f"{ROOT}/security/scram-unknown-user-secret"
QUOTAS_PREFIX: Final = f"{ROOT}/security/quotas/"  # one key per quota entity
CONSUMER_OFFSETS_TOPIC: Final = "__consumer_offsets"
TRANSACTION_STATE_TOPIC: Final = "__transaction_state"
TOPIC_NAME_LENGTH_MAX: Final = 249
_TOPIC_NAME: Final = re.compile(r"^[a-zA-Z0-9._-]+$")
_PARTITION_STATE_KEY: Final = re.compile(r"^(?P<topic>[^/]+)/partitions/(?P<partition>\d+)/state$")


def broker_key(broker_id: int) -> str:
    return f"{BROKERS_PREFIX}{broker_id}"


def coordinator_claim_key(partition: int, prefix: str = COORDINATOR_PARTITIONS_PREFIX) -> str:
    """The claim on a partition of __consumer_offsets (__transaction_state: TXN_COORDINATOR_PARTITIONS_PREFIX)."""
    return f"{prefix}{partition}/owner"


def coordinator_epoch_key(partition: int, prefix: str = COORDINATOR_PARTITIONS_PREFIX) -> str:
    return f"{prefix}{partition}/epoch"


def coordinator_owner_of(partition: int, instances: list[int]) -> int:
    """The coordinator instance meant to own a __consumer_offsets partition: rendezvous hashing,
    the highest hash of (instance, partition) wins, so an instance joining or leaving moves only
    its own share."""
    return max(instances, key=lambda instance: (zlib.crc32(f"{instance}:{partition}".encode()), instance))


def offsets_partition_for(group_id: str, partition_count: int) -> int:
    """The __consumer_offsets partition of a group: Kafka's abs(groupId.hashCode()) % count."""
    data = group_id.encode("utf-16-be")  # Java strings hash their UTF-16 code units
    code = 0
    for index in range(0, len(data), 2):
        code = (31 * code + (data[index] << 8 | data[index + 1])) & 0xFFFFFFFF
    signed = code - (1 << 32) if code >= 1 << 31 else code
    return (0 if signed == -(1 << 31) else abs(signed)) % partition_count


def gateway_consumer_key(group: str, instance: str) -> str:
    """Where a REST consumer instance is registered (group and instance names are URL path segments,
    so neither holds a '/')."""
    return f"{GATEWAY_CONSUMERS_PREFIX}{group}/{instance}"


def scram_credential_key(user: str) -> str:
    return f"{SCRAM_CREDENTIALS_PREFIX}{user}"


def topic_key(topic: str) -> str:
    return f"{TOPICS_PREFIX}{topic}"


def partition_state_key(topic: str, partition: int) -> str:
    return f"{TOPICS_PREFIX}{topic}/partitions/{partition}/state"


def parse_topics_key(key: str) -> tuple[str, int | None]:
    """(topic, None) for a topic record key, (topic, partition) for a partition state key."""
    assert key.startswith(TOPICS_PREFIX), key
    rest = key[len(TOPICS_PREFIX) :]
    if "/" not in rest:
        return rest, None
    match = _PARTITION_STATE_KEY.match(rest)
    if match is None:
        raise ValueError(f"unexpected key {key!r}")
    return match["topic"], int(match["partition"])


def validate_topic_name(name: str) -> None:
    """Kafka's rule: 1-249 characters of [a-zA-Z0-9._-], and not "." or ".."."""
    if not name:
        raise InvalidTopicError("topic name is empty")
    if len(name) > TOPIC_NAME_LENGTH_MAX:
        raise InvalidTopicError(f"topic name is {len(name)} characters; at most {TOPIC_NAME_LENGTH_MAX}")
    if name in (".", ".."):
        raise InvalidTopicError(f"topic name cannot be {name!r}")
    if not _TOPIC_NAME.match(name):
        raise InvalidTopicError(f"topic name {name!r} may only hold ASCII letters, digits, '.', '_' and '-'")


_FIELD_NAMES: dict[type, frozenset[str]] = {}


def _field_names(record_type: type) -> frozenset[str]:
    names = _FIELD_NAMES.get(record_type)
    if names is None:
        names = _FIELD_NAMES[record_type] = frozenset(field.name for field in dataclasses.fields(record_type))
    return names


class _JsonRecord:
    def to_json(self) -> bytes:
        return json.dumps(dataclasses.asdict(self), sort_keys=True).encode()  # type: ignore[call-overload]

    @classmethod
    def from_json(cls, data: bytes) -> Self:
        """The record; fields it does not know are dropped, so a process reads what a newer one
        wrote during a rolling upgrade (a broker's registration with its Kafka listener, say)."""
        return cls._from_fields(json.loads(data))

    @classmethod
    def many_from_json(cls, values: Sequence[bytes]) -> list[Self]:
        """`from_json` of each, parsed as one JSON array: a new controller reads 10,000 partition
        states at once, and one `json.loads` each (with `dataclasses.fields` each) was 0.45 s of
        its 0.63 s load (cProfile). Values that do not parse one by one fail here too: the array
        must hold exactly one object per value, else each is parsed alone (and the bad one raises)."""
        if not values:
            return []
        parsed = json.loads(b"[" + b",".join(values) + b"]")
        if len(parsed) != len(values) or not all(isinstance(fields, dict) for fields in parsed):
            return [cls.from_json(value) for value in values]
        return [cls._from_fields(fields) for fields in parsed]

    @classmethod
    def _from_fields(cls, fields: dict[str, Any]) -> Self:
        known = _field_names(cls)
        if fields.keys() <= known:
            return cls(**fields)
        return cls(**{name: value for name, value in fields.items() if name in known})


@dataclasses.dataclass(frozen=True, slots=True)
class BrokerRegistration(_JsonRecord):
    """/tidelog/brokers/ids/{id}, leased: it vanishes when the broker dies."""

    broker_id: int
    host: str
    port: int
    rack: str = ""
    incarnation: str = ""  # new at every process start: a re-registration is a new broker life
    kafka_host: str = ""  # the advertised Kafka-protocol listener (kafka_port 0: none)
    kafka_port: int = 0

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.port}"


@dataclasses.dataclass(frozen=True, slots=True)
class ControllerRecord(_JsonRecord):
    """/tidelog/controller/epoch: the active controller and its epoch (grows at every election).

    The election key's value (under /tidelog/controller/election/) is the same record.
    """

    controller_id: int
    epoch: int
    endpoint: str


@dataclasses.dataclass(frozen=True, slots=True)
class TopicRecord(_JsonRecord):
    """/tidelog/topics/{t}: replica assignment (partition → broker ids) and configs.

    While a partition is reassigned (KIP-455), its assignment is RS (the target replicas first,
    then the original ones leaving), `adding` / `removing` hold its AR and RR, and `original` its
    ORS in order (what a cancel restores).
    """

    topic_id: str
    assignment: dict[str, list[int]]  # JSON object keys are strings: partition number as text
    configs: dict[str, str]
    adding: dict[str, list[int]] = dataclasses.field(default_factory=dict)
    removing: dict[str, list[int]] = dataclasses.field(default_factory=dict)
    original: dict[str, list[int]] = dataclasses.field(default_factory=dict)

    def replicas(self, partition: int) -> list[int]:
        return self.assignment[str(partition)]

    @property
    def partition_count(self) -> int:
        return len(self.assignment)


@dataclasses.dataclass(frozen=True, slots=True)
class PartitionStateRecord(_JsonRecord):
    """/tidelog/topics/{t}/partitions/{p}/state: leadership, written only by the controller."""

    leader: int
    isr: list[int]
    leader_epoch: int
    partition_epoch: int
    controller_epoch: int

    def __post_init__(self) -> None:
        assert self.leader == -1 or self.leader in self.isr, "the leader is always in the ISR"
        assert self.leader_epoch >= 0 and self.partition_epoch >= 0

    def to_json(self) -> bytes:
        """The same bytes as every record's `to_json`, written out: `dataclasses.asdict` took 10.7 µs
        of its 11 (3.4 µs this way), and a controller writes thousands at once (a restarted broker
        back in 6,700 ISRs: 13% of the controller's time then, py-spy)."""
        fields = {
            "controller_epoch": self.controller_epoch,
            "isr": list(self.isr),
            "leader": self.leader,
            "leader_epoch": self.leader_epoch,
            "partition_epoch": self.partition_epoch,
        }
        return json.dumps(fields, sort_keys=True).encode()

    def changed(
        self, *, controller_epoch: int, leader: int | None = None, isr: list[int] | None = None
    ) -> PartitionStateRecord:
        """The next version of this state: the partition epoch grows at every change, the leader
        epoch at every change of leader (the one place both rules live)."""
        new_leader = self.leader if leader is None else leader
        return dataclasses.replace(
            self,
            leader=new_leader,
            isr=list(self.isr if isr is None else isr),
            leader_epoch=self.leader_epoch + (new_leader != self.leader),
            partition_epoch=self.partition_epoch + 1,
            controller_epoch=controller_epoch,
        )


@dataclasses.dataclass(frozen=True, slots=True)
class ProducerIdBlockRecord(_JsonRecord):
    """/tidelog/producer-ids/block: the last block of producer ids handed to a broker (KIP-730).

    A broker claims [first_id, first_id + size) by replacing the record it read (compared on its
    mod revision), so no two brokers ever hand out the same id.
    """

    broker_id: int
    first_id: int
    size: int

    @property
    def next_first_id(self) -> int:
        return self.first_id + self.size


@dataclasses.dataclass(frozen=True, slots=True)
class CoordinatorInstanceRecord(_JsonRecord):
    """/tidelog/coordinators/instances/{id}, leased: a live group coordinator instance."""

    instance_id: int
    endpoint: str


@dataclasses.dataclass(frozen=True, slots=True)
class CoordinatorClaimRecord(_JsonRecord):
    """/tidelog/coordinators/partitions/{p}/owner, under the owner's lease: who serves the groups
    of __consumer_offsets partition p, and its claim epoch (also its producer epoch there)."""

    instance_id: int
    endpoint: str
    epoch: int


@dataclasses.dataclass(frozen=True, slots=True)
class GatewayConsumerRecord(_JsonRecord):
    """/tidelog/gateways/consumers/{group}/{instance}, under its gateway's lease: which gateway holds
    a REST consumer instance (any other gateway forwards that instance's requests there)."""

    gateway_id: str
    url: str
    principal: str
