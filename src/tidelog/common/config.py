"""Every configurable limit and policy of Tidelog, defined once.

Names, meanings and defaults follow Apache Kafka's configs (`segment.bytes`, `retention.ms`, ...)
so a Kafka user already knows them. Each definition carries its bounds; parsing rejects anything
outside them with INVALID_CONFIG instead of letting a bad value reach the data path. The table in
docs/configuration.md is generated from `ALL_CONFIGS` (`python -m tidelog.common.config`) and a
test fails when it is stale.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable, Mapping
from typing import Final

from tidelog.common.errors import InvalidConfigError
from tidelog.common.fixed_limits import FIXED_LIMITS
from tidelog.common.security.protocol import SecurityProtocol

__all__ = [
    "ALL_CONFIGS",
    "BROKER_CONFIGS",
    "CONSUMER_CONFIGS",
    "CONTROLLER_CONFIGS",
    "COORDINATOR_CONFIGS",
    "GATEWAY_CONFIGS",
    "LOG_CONFIGS",
    "LONG_MAX",
    "OPERATOR_CONFIGS",
    "PRODUCER_CONFIGS",
    "SECURITY_CONFIGS",
    "ConfigDef",
    "ConfigScope",
    "ConfigType",
    "parse_configs",
    "render_markdown",
]

LONG_MAX: Final = 2**63 - 1
INT_MAX: Final = 2**31 - 1
KIB: Final = 1024
MIB: Final = 1024 * KIB
GIB: Final = 1024 * MIB
HOUR_MS: Final = 3_600_000
DAY_MS: Final = 24 * HOUR_MS


class ConfigType(enum.Enum):
    INT = "int"
    LONG = "long"
    DOUBLE = "double"
    STRING = "string"
    LIST = "list"
    BOOLEAN = "boolean"


class ConfigScope(enum.Enum):
    TOPIC = "topic"
    BROKER = "broker"
    CONTROLLER = "controller"
    COORDINATOR = "coordinator"
    GATEWAY = "gateway"
    OPERATOR = "operator"
    PRODUCER = "producer"
    CONSUMER = "consumer"
    SECURITY = "security"


ConfigValue = int | float | str | bool | tuple[str, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class ConfigDef:
    name: str
    type: ConfigType
    default: ConfigValue
    doc: str
    scope: ConfigScope = ConfigScope.TOPIC
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] | None = None

    def parse(self, raw: object) -> ConfigValue:
        """Turn a raw value (string from a CLI/CRD, or an already typed value) into a checked one."""
        value = self._convert(raw)
        self._check(value)
        return value

    def _convert(self, raw: object) -> ConfigValue:
        try:
            match self.type:
                case ConfigType.INT | ConfigType.LONG:
                    if isinstance(raw, bool) or not isinstance(raw, int | str):
                        raise ValueError
                    return int(raw)
                case ConfigType.DOUBLE:
                    if isinstance(raw, bool) or not isinstance(raw, int | float | str):
                        raise ValueError
                    return float(raw)
                case ConfigType.BOOLEAN:
                    if isinstance(raw, bool):
                        return raw
                    if isinstance(raw, str) and raw.lower() in ("true", "false"):
                        return raw.lower() == "true"
                    raise ValueError
                case ConfigType.LIST:
                    items = raw.split(",") if isinstance(raw, str) else list(raw)  # type: ignore[call-overload]
                    return tuple(str(item).strip() for item in items if str(item).strip())
                case ConfigType.STRING:
                    if not isinstance(raw, str):
                        raise ValueError
                    return raw
        except (ValueError, TypeError):
            pass
        raise InvalidConfigError(f"{self.name}: {raw!r} is not a valid {self.type.value}")

    def _check(self, value: ConfigValue) -> None:
        if isinstance(value, int | float) and not isinstance(value, bool):
            if self.minimum is not None and value < self.minimum:
                raise InvalidConfigError(f"{self.name}: {value} is below the minimum {self.minimum:g}")
            if self.maximum is not None and value > self.maximum:
                raise InvalidConfigError(f"{self.name}: {value} is above the maximum {self.maximum:g}")
        if self.choices is not None:
            values = value if isinstance(value, tuple) else (value,)
            for item in values:
                if item not in self.choices:
                    raise InvalidConfigError(f"{self.name}: {item!r} is not one of {', '.join(self.choices)}")
            if isinstance(value, tuple) and not value:
                raise InvalidConfigError(f"{self.name}: needs at least one of {', '.join(self.choices)}")


def _long(name: str, default: int, doc: str, minimum: int = 0, maximum: int = LONG_MAX) -> ConfigDef:
    return ConfigDef(name, ConfigType.LONG, default, doc, minimum=minimum, maximum=maximum)


def _int(name: str, default: int, doc: str, minimum: int = 0, maximum: int = INT_MAX) -> ConfigDef:
    return ConfigDef(name, ConfigType.INT, default, doc, minimum=minimum, maximum=maximum)


# Topic-level log configs: what a partition log obeys. Brokers take the same names as defaults.
LOG_CONFIGS: Final[tuple[ConfigDef, ...]] = (
    _int("segment.bytes", GIB, "Roll a new segment once the active one would exceed this many bytes.", minimum=4 * KIB),
    _long("segment.ms", 7 * DAY_MS, "Roll a new segment once the active one's first batch is this old.", minimum=1),
    _int(
        "segment.index.bytes",
        10 * MIB,
        "Largest size of a segment's offset index (8 bytes an entry); a full index rolls the segment.",
        minimum=64,
    ),
    _int(
        "index.interval.bytes",
        4 * KIB,
        "Add an offset-index entry after at least this many log bytes since the last one.",
    ),
    _long("flush.messages", LONG_MAX, "fsync the log after this many records since the last flush.", minimum=1),
    _long("flush.ms", LONG_MAX, "fsync the log when its oldest unflushed data is this old.", minimum=0),
    _long(
        "retention.ms", 7 * DAY_MS, "Delete a segment once its newest record is this old; -1 keeps forever.", minimum=-1
    ),
    _long(
        "retention.bytes",
        -1,
        "Delete the oldest segments while the partition is larger than this; -1 means no limit.",
        minimum=-1,
    ),
    ConfigDef(
        "cleanup.policy",
        ConfigType.LIST,
        ("delete",),
        "delete: retention removes old segments; compact: keep the last record of each key.",
        choices=("delete", "compact"),
    ),
    _long(
        "delete.retention.ms",
        DAY_MS,
        "How long compaction keeps a tombstone (null value) after the segment holding it was cleaned.",
    ),
    _long("min.compaction.lag.ms", 0, "A record is not compacted before it is this old."),
    ConfigDef(
        "min.cleanable.dirty.ratio",
        ConfigType.DOUBLE,
        0.5,
        "Compact once this fraction of the log (by bytes) has not been cleaned yet.",
        minimum=0.0,
        maximum=1.0,
    ),
    _int("max.message.bytes", MIB + 12, "Largest record batch (after compression) a partition accepts.", minimum=64),
    _int(
        "min.insync.replicas",
        1,
        "With acks=all, writes fail (NOT_ENOUGH_REPLICAS) below this many in-sync replicas.",
        minimum=1,
    ),
    ConfigDef(
        "unclean.leader.election.enable",
        ConfigType.BOOLEAN,
        False,
        "Elect an out-of-sync replica when no in-sync one is alive (may lose acknowledged records).",
    ),
    ConfigDef(
        "message.timestamp.type",
        ConfigType.STRING,
        "CreateTime",
        "CreateTime keeps the producer's timestamps; LogAppendTime stamps batches on append.",
        choices=("CreateTime", "LogAppendTime"),
    ),
)


def _scoped(scope: ConfigScope, *definitions: ConfigDef) -> tuple[ConfigDef, ...]:
    return tuple(dataclasses.replace(definition, scope=scope) for definition in definitions)


BROKER_CONFIGS: Final[tuple[ConfigDef, ...]] = _scoped(
    ConfigScope.BROKER,
    _int(
        "broker.session.timeout.ms",
        6000,
        "TTL of the broker's etcd lease: a silent broker is gone after it.",
        minimum=1000,
        maximum=3_600_000,
    ),
    ConfigDef(
        "broker.readiness.file",
        ConfigType.STRING,
        "",
        "A file the broker keeps while it is ready for the next broker to restart: no partition it hosts "
        "under-replicated among registered brokers, and (with the automatic leader rebalance) the leaderships "
        "it prefers handed back (Kubernetes' readiness probe checks it; empty: none).",
    ),
    _int(
        "num.io.threads",
        8,
        "Threads doing disk work (appends, reads, flushes) off the event loop.",
        minimum=1,
        maximum=256,
    ),
    _long("log.flush.scheduler.interval.ms", 1000, "How often logs are checked against flush.ms.", minimum=1),
    _long("log.retention.check.interval.ms", 300_000, "How often retention runs over every log.", minimum=1),
    _int(
        "socket.request.max.bytes",
        100 * MIB,
        "Largest gRPC message any service accepts or sends, and largest Kafka-protocol request a broker reads.",
        minimum=1024,
    ),
    ConfigDef(
        "listeners",
        ConfigType.LIST,
        (),
        "The broker's Kafka-protocol listeners in Kafka's syntax, NAME://host:port (KAFKA://0.0.0.0:9092; port 0 "
        "takes a free one). The gRPC listener is the one --host/--port name; empty: no Kafka listener "
        "(docs/kafka-protocol.md).",
    ),
    ConfigDef(
        "advertised.listeners",
        ConfigType.LIST,
        (),
        "Where clients are told each listener is, NAME://host:port (empty, or a listener left out: its own address, "
        "with 0.0.0.0 replaced by --advertised-host).",
    ),
    _long(
        "connections.max.idle.ms",
        600_000,
        "A Kafka-protocol connection with no request for this long is closed (the client reconnects).",
        minimum=1000,
    ),
    _int(
        "max.connections",
        10_000,
        "Kafka-protocol connections a broker holds at once; one more is closed as soon as it is accepted.",
        minimum=1,
    ),
    _int("fetch.max.bytes", 55 * MIB, "Upper bound on the bytes one fetch response carries.", minimum=1024),
    _int(
        "fetch.max.wait.ms.max", 30_000, "Upper bound the broker puts on a fetch's max_wait_ms (long poll).", minimum=0
    ),
    _long(
        "replica.lag.time.max.ms",
        30_000,
        "A follower that has not caught up with the leader's log end for this long leaves the ISR.",
        minimum=100,
    ),
    _int("replica.fetch.wait.max.ms", 500, "A follower's fetch long-polls the leader for up to this long.", minimum=1),
    _int("replica.fetch.max.bytes", MIB, "Bytes a follower fetches per partition and request.", minimum=1024),
    _int(
        "replica.fetch.response.max.bytes",
        10 * MIB,
        "Bytes a follower asks for in one fetch over all its partitions (at least one batch comes anyway).",
        minimum=1024,
    ),
    _int("replica.fetch.backoff.ms", 200, "Wait after a follower's fetch fails before the next.", minimum=0),
    _int(
        "max.incremental.fetch.session.cache.slots",
        1000,
        "Incremental fetch sessions (KIP-227) a leader keeps: one per follower broker and one per consumer "
        "fetching from it; beyond this the least recently used goes, a consumer's new session taking only a "
        "consumer's place (none free: that consumer fetches without one).",
        minimum=1,
        maximum=100_000,
    ),
    ConfigDef(
        "controlled.shutdown.enable",
        ConfigType.BOOLEAN,
        True,
        "A broker stopping cleanly first asks the controller to move its leaderships away.",
    ),
    _int("controlled.shutdown.max.retries", 3, "Retries when the controller cannot be reached.", minimum=0),
    _long("controlled.shutdown.retry.backoff.ms", 5000, "Wait between those retries.", minimum=0),
    _long(
        "producer.id.expiration.ms",
        86_400_000,
        "A partition forgets an idempotent producer silent this long (its sequences restart unchecked).",
        minimum=1,
    ),
    ConfigDef(
        "transaction.partition.verification.enable",
        ConfigType.BOOLEAN,
        True,
        "KIP-890: before a transaction's first batch in a partition, ask its coordinator whether the transaction "
        "is open and holds the partition (INVALID_TXN_STATE if not), so no hanging transaction can start.",
    ),
    _int(
        "metrics.partition.series.max",
        10_000,
        "Partition replicas a broker exports per-partition series for (log size, offsets); beyond "
        "it, per-topic sums only, so a scrape and Prometheus's series count stay bounded.",
        minimum=0,
    ),
    _int("quota.window.num", 11, "Samples a client quota's rate is measured over.", minimum=2, maximum=1000),
    _int("quota.window.size.seconds", 1, "Length of each of those samples.", minimum=1, maximum=3600),
    _int(
        "quota.throttle.max.ms",
        300_000,
        "Longest throttle one response asks for (a bound on a client's wait after a burst).",
        minimum=1,
    ),
)

CONTROLLER_CONFIGS: Final[tuple[ConfigDef, ...]] = _scoped(
    ConfigScope.CONTROLLER,
    _int(
        "controller.session.timeout.ms",
        6000,
        "TTL of the controller's etcd lease (its election key).",
        minimum=1000,
        maximum=3_600_000,
    ),
    _int("num.partitions", 1, "Partitions of a topic created without a count.", minimum=1, maximum=10_000),
    _int("default.replication.factor", 1, "Replicas of a topic created without a factor.", minimum=1, maximum=100),
    ConfigDef("delete.topic.enable", ConfigType.BOOLEAN, True, "Whether topics can be deleted."),
    _int("controller.socket.timeout.ms", 5000, "Deadline of each controller → broker request.", minimum=100),
    ConfigDef(
        "controller.broker.liveness.probe.enable",
        ConfigType.BOOLEAN,
        True,
        "Whether the active controller watches each broker's process and, once its port refuses "
        "connections, revokes its registration lease instead of waiting for broker.session.timeout.ms "
        "(a frozen or unreachable broker still waits for the lease; ADR 0016).",
    ),
    ConfigDef(
        "auto.leader.rebalance.enable",
        ConfigType.BOOLEAN,
        True,
        "Hand leadership back to preferred replicas when a broker's share led by others grows too large.",
    ),
    ConfigDef(
        "leader.imbalance.check.interval.seconds",
        ConfigType.DOUBLE,
        300.0,
        "How often the active controller checks the leader balance (also when a preferred replica rejoins an ISR).",
        minimum=0.1,
    ),
    _int(
        "leader.imbalance.per.broker.percentage",
        10,
        "A broker whose preferred partitions are led elsewhere above this share gets them back.",
        minimum=0,
        maximum=100,
    ),
    _long(
        "controller.metrics.exporter.refresh.ms",
        5000,
        "How often, at most, the active controller asks the leaders for partition offsets and the "
        "coordinators for group offsets, which it exports as kafka_exporter does (one target for the whole "
        "family); a scrape reports the latest answer. It asks only while scraped: once before each scrape "
        "when scrapes come less often, every tick when more often, never while nobody scrapes (ADR 0033).",
        minimum=500,
    ),
    _int(
        "controller.metrics.partition.series.max",
        10_000,
        "Partitions the active controller exports per-partition series for (leader, replicas, ISR, "
        "preferred, under-replicated); beyond it, per-topic and cluster figures only.",
        minimum=0,
    ),
)

COORDINATOR_CONFIGS: Final[tuple[ConfigDef, ...]] = _scoped(
    ConfigScope.COORDINATOR,
    _int(
        "coordinator.session.timeout.ms",
        6000,
        "TTL of a coordinator instance's etcd lease: its __consumer_offsets partitions move after it.",
        minimum=1000,
        maximum=3_600_000,
    ),
    _int(
        "offsets.topic.num.partitions",
        50,
        "Partitions of __consumer_offsets; a group lives on hash(group.id) mod this. Fixed once created.",
        minimum=1,
        maximum=1000,
    ),
    _int(
        "offsets.topic.replication.factor",
        3,
        "Replicas of __consumer_offsets. As Kafka, it is created only once this many brokers are alive (a starting "
        "coordinator waits for them), never with fewer; a cluster of fewer brokers sets it to its size.",
        minimum=1,
        maximum=100,
    ),
    _int("group.min.session.timeout.ms", 6000, "Smallest session.timeout.ms a member may ask for.", minimum=1),
    _int("group.max.session.timeout.ms", 1_800_000, "Largest session.timeout.ms a member may ask for.", minimum=1),
    _int(
        "group.initial.rebalance.delay.ms",
        3000,
        "An empty group's first rebalance waits this long (more, up to the rebalance timeout, while members keep "
        "joining) so a starting fleet is assigned once.",
        minimum=0,
    ),
    _int(
        "offsets.retention.minutes",
        10080,
        "An empty group's committed offsets are dropped this long after its last commit.",
        minimum=1,
    ),
    _int("group.max.size", 1000, "Members one group may have; more are refused.", minimum=1),
    _int(
        "transaction.state.log.num.partitions",
        50,
        "Partitions of __transaction_state; a transactional.id lives on hash(transactional.id) mod this. "
        "Fixed once created.",
        minimum=1,
        maximum=1000,
    ),
    _int(
        "transaction.state.log.replication.factor",
        3,
        "Replicas of __transaction_state, created (as __consumer_offsets) only once this many brokers are alive.",
        minimum=1,
        maximum=100,
    ),
    _int(
        "transaction.max.timeout.ms",
        900_000,
        "Largest transaction.timeout.ms a producer may ask for (INVALID_TRANSACTION_TIMEOUT beyond).",
        minimum=1,
    ),
    _int(
        "transactional.id.expiration.ms",
        604_800_000,
        "A transactional.id with no transaction for this long is forgotten (its record deleted).",
        minimum=1,
    ),
    _int(
        "transaction.abort.timed.out.transaction.cleanup.interval.ms",
        10_000,
        "How often the coordinator looks for transactions past their timeout, to abort them.",
        minimum=1,
    ),
)

GATEWAY_CONFIGS: Final[tuple[ConfigDef, ...]] = _scoped(
    ConfigScope.GATEWAY,
    _int(
        "gateway.session.timeout.ms",
        6000,
        "TTL of a gateway replica's etcd lease: its consumer instances are forgotten after it.",
        minimum=1000,
        maximum=3_600_000,
    ),
    _int(
        "consumer.instance.timeout.ms",
        300_000,
        "A REST consumer instance idle this long is closed (it leaves its group) and forgotten.",
        minimum=1000,
    ),
    _int(
        "consumer.request.timeout.ms",
        1000,
        "Longest a records GET waits for records (long poll) when it gives no ?timeout.",
        minimum=0,
        maximum=300_000,
    ),
    _long(
        "consumer.request.max.bytes",
        64 * MIB,
        "Most key and value bytes one records GET returns (?max_bytes may ask for less).",
        minimum=1024,
    ),
    _int("consumer.instances.max", 1000, "REST consumer instances one gateway holds; more are refused.", minimum=1),
    _long(
        "rest.request.max.bytes",
        16 * MIB,
        "Largest request body the gateway reads; a larger one is refused with 413 and nothing of it is produced.",
        minimum=1024,
        maximum=1 * GIB,
    ),
    _int("produce.records.max", 10_000, "Records one produce request may carry.", minimum=1),
    _long(
        "producer.linger.ms",
        2,
        "linger.ms of the gateway's producer (REST Proxy's producer.* pass-through).",
        minimum=0,
    ),
    ConfigDef(
        "authentication.method",
        ConfigType.STRING,
        "NONE",
        "How REST callers authenticate (REST Proxy's): NONE, or BASIC (HTTP Basic with a SCRAM user's "
        "name and password, checked against the cluster's credentials). --credentials-file adds API keys.",
        choices=("NONE", "BASIC"),
    ),
    ConfigDef(
        "rest.principal.propagation.enable",
        ConfigType.BOOLEAN,
        True,
        "Act towards the cluster as the REST caller's principal (its ACLs apply), not as the gateway's "
        "own; the gateway's principal must be in the services' gateway.principals.",
    ),
    ConfigDef(
        "rest.forwarded.trusted.proxies",
        ConfigType.LIST,
        (),
        "Addresses of reverse proxies whose X-Forwarded-For / X-Forwarded-Proto headers are believed "
        "(the caller's address, which host ACLs match). Empty: no forwarded header is believed, from "
        "anyone; '*' believes every peer (only behind a proxy that overwrites the headers).",
    ),
    _int(
        "rest.principal.clients.max",
        256,
        "Principals whose cluster clients (connections, producer) the gateway keeps; the least recent go.",
        minimum=1,
    ),
    ConfigDef(
        "rest.ssl.certificate.location",
        ConfigType.STRING,
        "",
        "PEM certificate chain of the HTTPS listener (empty: HTTP).",
    ),
    ConfigDef("rest.ssl.key.location", ConfigType.STRING, "", "PEM private key of the HTTPS listener."),
    ConfigDef("rest.ssl.ca.location", ConfigType.STRING, "", "PEM CAs REST client certificates are verified against."),
    ConfigDef(
        "rest.ssl.client.auth",
        ConfigType.STRING,
        "none",
        "none, requested or required: client certificates at the HTTPS listener.",
        choices=("none", "requested", "required"),
    ),
)

OPERATOR_CONFIGS: Final[tuple[ConfigDef, ...]] = _scoped(
    ConfigScope.OPERATOR,
    _long(
        "operator.reconcile.interval.ms",
        60_000,
        "How often every resource is reconciled again even without a change (what was changed outside "
        "Kubernetes is put back then).",
        minimum=1000,
    ),
    _long(
        "operator.request.timeout.ms",
        10_000,
        "Deadline of one request to the cluster; a cluster that does not answer is a condition, retried.",
        minimum=100,
    ),
    _long(
        "operator.retry.backoff.ms",
        1000,
        "First delay before a reconcile the cluster did not answer is tried again; doubled on each "
        "failure in a row up to operator.retry.backoff.max.ms (Kafka's retry.backoff.ms).",
        minimum=100,
    ),
    _long(
        "operator.retry.backoff.max.ms",
        30_000,
        "Longest delay between retries of a reconcile the cluster does not answer (Kafka's retry.backoff.max.ms).",
        minimum=100,
    ),
    _long(
        "operator.peering.lifetime.ms",
        60_000,
        "With several operator replicas (kopf peering): how long a silent replica counts as alive; the "
        "standby with the next priority takes over this long after the active one stops.",
        minimum=5000,
    ),
)

PRODUCER_CONFIGS: Final[tuple[ConfigDef, ...]] = _scoped(
    ConfigScope.PRODUCER,
    ConfigDef(
        "acks",
        ConfigType.STRING,
        "all",
        "0: no wait; 1: the leader appended; all: every in-sync replica.",
        choices=("0", "1", "all", "-1"),
    ),
    ConfigDef(
        "enable.idempotence",
        ConfigType.BOOLEAN,
        True,
        "Each batch written once even when retried (producer id + sequences); only with acks=all.",
    ),
    ConfigDef(
        "transactional.id",
        ConfigType.STRING,
        "",
        "Makes the producer transactional (KIP-98): its transactions survive its restarts under this id, and a "
        "new instance fences older ones. Needs idempotence (acks=all).",
    ),
    _int(
        "transaction.timeout.ms",
        60_000,
        "The coordinator aborts a transaction open longer than this (at most transaction.max.timeout.ms).",
        minimum=1,
    ),
    _int("batch.size", 16_384, "A partition's batch is sent once it holds this many bytes.", minimum=1),
    _long("linger.ms", 5, "...or once it is this old.", minimum=0),
    ConfigDef(
        "compression.type",
        ConfigType.STRING,
        "none",
        "Codec of produced batches.",
        choices=("none", "gzip", "snappy", "lz4", "zstd"),
    ),
    _long("buffer.memory", 32 * MIB, "Bytes of records waiting to be sent; send() blocks beyond it.", minimum=1024),
    _int("max.request.size", MIB, "Largest produce request (and record).", minimum=1024),
    _int("retries", INT_MAX, "Retries of a batch on retriable errors, within delivery.timeout.ms."),
    _long("retry.backoff.ms", 100, "Wait before retrying a batch."),
    _long("delivery.timeout.ms", 120_000, "A record not acknowledged by then fails.", minimum=1),
    _int("request.timeout.ms", 30_000, "Deadline of one request to a broker.", minimum=1),
    _int(
        "max.in.flight.requests.per.connection",
        5,
        "Produce requests to one broker at a time, never two with batches of one partition (so order "
        "and idempotence hold at any value).",
        minimum=1,
        maximum=5,
    ),
    _long(
        "max.block.ms",
        60_000,
        "How long send() waits for the topic's metadata, or for room in buffer.memory.",
        minimum=0,
    ),
)

CONSUMER_CONFIGS: Final[tuple[ConfigDef, ...]] = _scoped(
    ConfigScope.CONSUMER,
    ConfigDef(
        "auto.offset.reset",
        ConfigType.STRING,
        "latest",
        "Where a partition without a position starts.",
        choices=("earliest", "latest", "none"),
    ),
    ConfigDef(
        "isolation.level",
        ConfigType.STRING,
        "read_uncommitted",
        "read_committed: read only committed transactions' records, up to the last stable offset "
        "(KIP-98); read_uncommitted: everything up to the high watermark. Markers are never returned.",
        choices=("read_uncommitted", "read_committed"),
    ),
    _int("fetch.min.bytes", 1, "A fetch waits (up to fetch.max.wait.ms) for this many bytes.", minimum=0),
    _int("fetch.max.wait.ms", 500, "Longest a fetch waits for fetch.min.bytes (long poll).", minimum=0),
    _int("fetch.max.bytes", 50 * MIB, "Bytes one fetch response may carry.", minimum=1024),
    _int("max.partition.fetch.bytes", MIB, "Bytes one partition contributes to a fetch.", minimum=1024),
    _int("request.timeout.ms", 30_000, "Deadline of one request to a broker (beyond its long poll).", minimum=1),
    _long("retry.backoff.ms", 100, "Wait before fetching again from a broker whose fetch failed.", minimum=0),
    ConfigDef("client.id", ConfigType.STRING, "tidelog", "Prefix of the member id the coordinator gives a member."),
    ConfigDef(
        "group.instance.id",
        ConfigType.STRING,
        "",
        "Static membership: a member back under this id within its session keeps its partitions.",
    ),
    _int(
        "session.timeout.ms",
        45_000,
        "A member the coordinator hears nothing from this long is dropped (within the group.*.session bounds).",
        minimum=1,
    ),
    _int("heartbeat.interval.ms", 3000, "How often the background task heartbeats.", minimum=1),
    _int(
        "max.poll.interval.ms",
        300_000,
        "A member that does not call poll() this long leaves; also its rebalance timeout.",
        minimum=1,
    ),
    _int("max.poll.records", 500, "Records one poll() returns at most.", minimum=1),
    ConfigDef("enable.auto.commit", ConfigType.BOOLEAN, True, "Commit what poll() returned in the background."),
    _int("auto.commit.interval.ms", 5000, "How often auto-commit runs.", minimum=0),
    ConfigDef(
        "partition.assignment.strategy",
        ConfigType.LIST,
        ("range", "cooperative-sticky"),
        "Assignors in order of preference; the group uses one every member supports.",
        choices=("range", "roundrobin", "sticky", "cooperative-sticky"),
    ),
)

# How a process secures its connections: every service takes them for its listener and for the
# channels it opens to other services, every client (producer, consumer, admin, CLI, gateway,
# operator, Spark) for its channels. One listener per process, so `security.protocol` names both
# what it serves and what it speaks (Kafka splits them over `listeners` and
# `security.inter.broker.protocol`; docs/security.md).
SECURITY_CONFIGS: Final[tuple[ConfigDef, ...]] = _scoped(
    ConfigScope.SECURITY,
    ConfigDef(
        "security.protocol",
        ConfigType.STRING,
        "PLAINTEXT",
        "PLAINTEXT, SSL (TLS; with ssl.client.auth=required the certificate is the identity) or "
        "SASL_SSL (TLS, identity from a SCRAM-SHA-512 login).",
        choices=tuple(SecurityProtocol),
    ),
    ConfigDef(
        "ssl.certificate.location",
        ConfigType.STRING,
        "",
        "PEM file with this process's certificate chain (a listener's, or a client's for mutual TLS); "
        "re-read when it changes.",
    ),
    ConfigDef("ssl.key.location", ConfigType.STRING, "", "PEM file with the private key of that certificate."),
    ConfigDef(
        "ssl.ca.location",
        ConfigType.STRING,
        "",
        "PEM file of the CA certificates peers are verified against (empty: the system's roots).",
    ),
    ConfigDef(
        "metrics.host",
        ConfigType.STRING,
        "",
        "Address /metrics listens on (empty: the gRPC listener's; 127.0.0.1 keeps it off the network).",
    ),
    ConfigDef(
        "metrics.ssl.certificate.location",
        ConfigType.STRING,
        "",
        "PEM certificate chain of an HTTPS /metrics (Prometheus' tls_config); empty: plain HTTP.",
    ),
    ConfigDef(
        "metrics.ssl.key.location", ConfigType.STRING, "", "PEM private key of metrics.ssl.certificate.location."
    ),
    ConfigDef(
        "metrics.ssl.ca.location",
        ConfigType.STRING,
        "",
        "PEM CA of the client certificates /metrics requires (mutual TLS, Prometheus' tls_config cert_file); "
        "empty: none asked.",
    ),
    ConfigDef(
        "metrics.bearer.token.file",
        ConfigType.STRING,
        "",
        "File holding the token /metrics requires as `Authorization: Bearer` (Prometheus' authorization "
        "credentials_file); empty: none. Metrics name topics and groups: protect them where others can reach.",
    ),
    ConfigDef(
        "etcd.ssl.ca.location",
        ConfigType.STRING,
        "",
        "PEM file of the CA etcd's certificate is verified against: set, this process speaks TLS to etcd "
        "(as Kafka's zookeeper.ssl.client.enable); empty, plain HTTP/2.",
    ),
    ConfigDef(
        "etcd.ssl.certificate.location",
        ConfigType.STRING,
        "",
        "PEM certificate chain this process shows etcd (etcd's --client-cert-auth takes it as the client's "
        "identity); empty, none.",
    ),
    ConfigDef("etcd.ssl.key.location", ConfigType.STRING, "", "PEM private key of etcd.ssl.certificate.location."),
    ConfigDef(
        "ssl.client.auth",
        ConfigType.STRING,
        "none",
        "A listener's demand for client certificates: none, or required (mutual TLS). Kafka's "
        "`requested` cannot be offered over gRPC's Python TLS (docs/security.md).",
        choices=("none", "required"),
    ),
    ConfigDef(
        "ssl.principal.mapping.rules",
        ConfigType.STRING,
        "DEFAULT",
        "How a client certificate's subject becomes a User principal: Kafka's "
        "RULE:pattern/replacement/[LU] rules, comma-separated, tried in order; DEFAULT keeps the "
        "whole subject (CN=alice,O=team).",
    ),
    ConfigDef("sasl.mechanism", ConfigType.STRING, "SCRAM-SHA-512", "The SASL mechanism.", choices=("SCRAM-SHA-512",)),
    ConfigDef("sasl.username", ConfigType.STRING, "", "A client's SCRAM user name (SASL_SSL)."),
    ConfigDef("sasl.password", ConfigType.STRING, "", "That user's password (SASL_SSL)."),
    _long(
        "connections.max.reauth.ms",
        3_600_000,
        "A listener's SCRAM session lasts this long; the client then logs in again (Kafka's default 0, "
        "never, is not offered: sessions are not tied to a TCP connection's end here).",
        minimum=1000,
    ),
    ConfigDef(
        "authorizer.class.name",
        ConfigType.STRING,
        "",
        "A service's authorizer: empty (every request allowed) or AclAuthorizer (Kafka's ACLs, kept in etcd).",
        choices=("", "AclAuthorizer"),
    ),
    ConfigDef(
        "super.users",
        ConfigType.STRING,
        "",
        "Principals allowed everything, ';'-separated (User:admin;User:CN=ops,O=acme), as Kafka's.",
    ),
    ConfigDef(
        "allow.everyone.if.no.acl.found",
        ConfigType.BOOLEAN,
        False,
        "With the authorizer on: allow a request on a resource no ACL names at all.",
    ),
    ConfigDef(
        "controller.principals",
        ConfigType.STRING,
        "",
        "';'-separated principals of the controllers: only they send brokers LeaderAndIsr, StopReplica "
        "and UpdateMetadata.",
    ),
    ConfigDef(
        "broker.principals",
        ConfigType.STRING,
        "",
        "';'-separated principals of the brokers: only they fetch as followers, ask for ISR changes and "
        "controlled shutdown.",
    ),
    ConfigDef(
        "coordinator.principals",
        ConfigType.STRING,
        "",
        "';'-separated principals of the group coordinators: they read and write __consumer_offsets and "
        "describe every topic (lag).",
    ),
    ConfigDef(
        "gateway.principals",
        ConfigType.STRING,
        "",
        "';'-separated principals of the REST gateways: they act for the REST caller's principal, "
        "which each request names.",
    ),
)

ALL_CONFIGS: Final[tuple[ConfigDef, ...]] = (
    LOG_CONFIGS
    + BROKER_CONFIGS
    + CONTROLLER_CONFIGS
    + COORDINATOR_CONFIGS
    + GATEWAY_CONFIGS
    + OPERATOR_CONFIGS
    + PRODUCER_CONFIGS
    + CONSUMER_CONFIGS
    + SECURITY_CONFIGS
)

_BY_NAME: Final[dict[str, ConfigDef]] = {definition.name: definition for definition in ALL_CONFIGS}


def parse_configs(raw: Mapping[str, object], definitions: Iterable[ConfigDef] = ALL_CONFIGS) -> dict[str, ConfigValue]:
    """Check and convert `raw`; unknown names are an error, missing ones take their defaults."""
    known = {definition.name: definition for definition in definitions}
    unknown = sorted(set(raw) - set(known))
    if unknown:
        raise InvalidConfigError(f"unknown config(s): {', '.join(unknown)}")
    return {
        name: definition.parse(raw[name]) if name in raw else definition.default for name, definition in known.items()
    }


def render_markdown() -> str:
    lines = [
        "# Configuration reference",
        "",
        "Generated from `src/tidelog/common/config.py` by `python -m tidelog.common.config`;",
        "a test fails when this file is stale. Names and meanings follow Apache Kafka's configs.",
        "Topic configs are set per topic (`tidelog topic create --config`) and take broker-wide",
        "defaults from `--log-config`. Broker, controller, coordinator and gateway settings are given to",
        "the process as a flag (`--replica-lag-time-max-ms 1000`), as `--config NAME=VALUE`, or in a",
        "properties file (`--config-file`); flags win over `--config`, which wins over the file. The",
        "services read them as one frozen object per scope (`tidelog.common.settings`), built from",
        "this registry only, and hand them down whole (a component takes its scope's object). Producer",
        "and consumer settings are the clients' keyword arguments (dots become underscores); the Spark",
        "source and the CLI take them by these names. A value outside its bounds is refused with an",
        "error naming the setting. In the Helm chart, each component takes its settings by these names",
        "in its `config` map (`broker.config: {num.io.threads: 8}`, as Strimzi's `spec.kafka.config`);",
        "`values.schema.json` is generated from this registry (`python -m tidelog.dev.chart_schema`), so",
        "Helm refuses an unknown name or a value out of bounds.",
        "",
        "| name | scope | type | default | bounds | meaning |",
        "|---|---|---|---|---|---|",
    ]
    for definition in ALL_CONFIGS:
        bounds = []
        if definition.minimum is not None:
            bounds.append(f"≥ {definition.minimum:g}")
        if definition.maximum is not None and definition.maximum not in (LONG_MAX, INT_MAX):
            bounds.append(f"≤ {definition.maximum:g}")
        if definition.choices is not None:
            bounds.append(" / ".join(definition.choices))
        default = definition.default
        shown = ",".join(default) if isinstance(default, tuple) else str(default)
        lines.append(
            f"| `{definition.name}` | {definition.scope.value} | {definition.type.value} | `{shown}` "
            f"| {', '.join(bounds)} | {definition.doc} |"
        )
    lines += [
        "",
        "## Fixed limits",
        "",
        "Bounds built into the code, not settings (listed in `src/tidelog/common/fixed_limits.py`; a",
        "test holds each to the constant the code enforces). Every setting above has its bounds too.",
        "",
        "| constant | value | meaning |",
        "|---|---|---|",
    ]
    for limit in FIXED_LIMITS:
        value = f"{limit.value:,}" if isinstance(limit.value, int) else f"{limit.value:g}"
        lines.append(f"| `{limit.module}.{limit.attribute}` | {value} | {limit.doc} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(render_markdown(), end="")
