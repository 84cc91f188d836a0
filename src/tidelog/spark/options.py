"""The `tidelog` data source's options, named as Spark's Kafka source names them, checked before any
job starts: an unknown option, a bad value or two options that contradict each other is an
`InvalidOptionError` naming the option.

Spark hands a data source its options with lower-cased keys; errors name them as the user wrote
them in Spark's documentation (`startingOffsets`, not `startingoffsets`).
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from typing import Any, Final

from tidelog.client.consumer import Consumer
from tidelog.client.producer import Producer
from tidelog.common.config import SECURITY_CONFIGS
from tidelog.common.errors import InvalidConfigError
from tidelog.common.settings import ConsumerSettings, ProducerSettings, SecuritySettings, client_keywords

__all__ = [
    "EARLIEST",
    "LATEST",
    "InvalidOptionError",
    "ReadOptions",
    "WriteOptions",
    "read_options",
    "write_options",
]

EARLIEST: Final = -2  # as in Spark's Kafka source's JSON offsets
LATEST: Final = -1

READ_OPTIONS: Final = (
    "subscribe",
    "subscribePattern",
    "assign",
    "startingOffsets",
    "endingOffsets",
    "startingTimestamp",
    "startingOffsetsByTimestamp",
    "endingOffsetsByTimestamp",
    "maxOffsetsPerTrigger",
    "minPartitions",
    "maxRecordsPerPartition",
    "failOnDataLoss",
    "includeHeaders",
    "startingOffsetsByTimestampStrategy",
    "endingTimestamp",
    "minOffsetsPerTrigger",
    "maxTriggerDelay",
    "kafkaConsumer.pollTimeoutMs",
    "fetchOffset.numRetries",
    "fetchOffset.retryIntervalMs",
    "groupIdPrefix",
)
WRITE_OPTIONS: Final = ("topic", "includeHeaders", "idempotentRetries", "exactlyOnce", "failFirstAttemptAfterRecords")
# Client settings Spark's Kafka source takes that mean nothing to a source which joins no group and
# commits nothing (kafka.group.id names the group Spark's consumers would use): accepted, unused.
UNUSED_CLIENT_SETTINGS: Final = frozenset({"group.id"})
# Spark's defaults for its options of time and retries (Structured Streaming + Kafka guide).
POLL_TIMEOUT_MS_DEFAULT: Final = 120_000
FETCH_OFFSET_RETRIES_DEFAULT: Final = 3
FETCH_OFFSET_RETRY_INTERVAL_MS_DEFAULT: Final = 10
MAX_TRIGGER_DELAY_MS_DEFAULT: Final = 15 * 60 * 1000
# Spark's time suffixes (JavaUtils.timeStringAsMs), in milliseconds.
TIME_UNITS_MS: Final = {"us": 0.001, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}
BOOTSTRAP: Final = ("tidelog.bootstrap.servers", "kafka.bootstrap.servers")
PREFIXES: Final = ("tidelog.", "kafka.")
# Options Spark itself puts among a source's or sink's (load()'s path, writeStream's checkpoint).
SPARK_OWN: Final = frozenset({"path", "checkpointlocation", "queryname"})

# An offset spec per topic and partition, as Spark's Kafka source writes it: {"t": {"0": 23}}.
Offsets = dict[str, dict[int, int]]


class InvalidOptionError(ValueError):
    """An option of the tidelog data source is unknown, malformed, or contradicts another."""

    def __init__(self, option: str, message: str) -> None:
        super().__init__(f"option {option!r}: {message}")
        self.option = option


@dataclasses.dataclass(frozen=True)
class ReadOptions:
    bootstrap: tuple[str, ...]
    subscribe: tuple[str, ...] = ()
    subscribe_pattern: str | None = None
    assign: Offsets | None = None  # topic → partitions (values unused)
    starting: str | Offsets = "earliest"  # "earliest" | "latest" | per partition (-2/-1 allowed)
    ending: str | Offsets = "latest"
    starting_timestamp: int | None = None
    starting_by_timestamp: Offsets | None = None
    starting_by_timestamp_strategy: str = "error"  # no record at or after the timestamp: fail, or start at the end
    ending_by_timestamp: Offsets | None = None
    ending_timestamp: int | None = None
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = MAX_TRIGGER_DELAY_MS_DEFAULT
    poll_timeout_ms: int = POLL_TIMEOUT_MS_DEFAULT  # kafkaConsumer.pollTimeoutMs: a task waits so long for records
    fetch_offset_retries: int = FETCH_OFFSET_RETRIES_DEFAULT
    fetch_offset_retry_interval_ms: int = FETCH_OFFSET_RETRY_INTERVAL_MS_DEFAULT
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    client: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # Consumer keyword arguments


@dataclasses.dataclass(frozen=True)
class WriteOptions:
    bootstrap: tuple[str, ...]
    topic: str | None = None
    include_headers: bool = False
    client: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # Producer keyword arguments
    idempotent_retries: bool = False  # a retried task skips the rows an earlier attempt wrote (marker header)
    exactly_once: bool = False  # streaming: each micro-batch's rows committed once, in transactions (exactly_once.py)
    fail_first_attempt_after: int | None = None  # a test aid: a task's first attempt fails after so many


def _canonical(names: tuple[str, ...]) -> dict[str, str]:
    return {name.lower(): name for name in names}


def _split(
    options: Mapping[str, str], known: tuple[str, ...]
) -> tuple[dict[str, str], dict[str, str], tuple[str, ...]]:
    """(ours by canonical name, client settings by config name, bootstrap) from Spark's options."""
    canonical = _canonical(known)
    ours: dict[str, str] = {}
    client: dict[str, str] = {}
    bootstrap: str | None = None
    for raw_name, value in options.items():
        name = raw_name.lower()
        if name in BOOTSTRAP:
            bootstrap = str(value)
        elif name.startswith(PREFIXES):
            client[name.split(".", 1)[1]] = str(value)
        elif name in canonical:
            ours[canonical[name]] = str(value)
        elif name not in SPARK_OWN:
            raise InvalidOptionError(
                raw_name,
                f"unknown; the tidelog source takes {', '.join(known)}, "
                "tidelog.bootstrap.servers and tidelog.<client setting>",
            )
    if not bootstrap:
        raise InvalidOptionError("tidelog.bootstrap.servers", "required (or kafka.bootstrap.servers): host:port,...")
    servers = tuple(server.strip() for server in bootstrap.split(",") if server.strip())
    for server in servers:
        if not re.fullmatch(r"[^:\s]+:\d{1,5}", server):
            raise InvalidOptionError("tidelog.bootstrap.servers", f"{server!r} is not host:port")
    return ours, client, servers


def _client(settings: dict[str, str], accepted: frozenset[str], definitions: Any, scope: str) -> dict[str, Any]:
    """Client settings by their config names → keyword arguments of the client class (each config's
    attribute name, as the registry spells it), checked by the registry (names, types, bounds).
    `accepted`: the config names the client takes (its CONFIGS)."""
    security_names = {definition.name for definition in SECURITY_CONFIGS}
    security = {name: value for name, value in settings.items() if name in security_names}
    settings = {name: value for name, value in settings.items() if name not in security_names}
    for name in settings:
        if name not in accepted:
            raise InvalidOptionError(f"tidelog.{name}", f"not a {scope} setting the data source passes on")
    try:
        client: dict[str, Any] = client_keywords(settings, accepted, definitions, scope)
        checked_security = SecuritySettings.from_configs(security) if security else None
    except InvalidConfigError as error:
        raise InvalidOptionError(f"tidelog.{next(iter(settings or security))}", str(error)) from error
    if checked_security is not None:
        client["security"] = checked_security
    return client


def _bool(option: str, value: str) -> bool:
    lowered = value.strip().lower()
    if lowered not in ("true", "false"):
        raise InvalidOptionError(option, f"must be true or false, not {value!r}")
    return lowered == "true"


def _positive(option: str, value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise InvalidOptionError(option, f"must be a whole number, not {value!r}") from None
    if number <= 0:
        raise InvalidOptionError(option, f"must be positive, not {number}")
    return number


def _whole(option: str, value: str, *, minimum: int) -> int:
    try:
        number = int(value)
    except ValueError:
        raise InvalidOptionError(option, f"must be a whole number, not {value!r}") from None
    if number < minimum:
        raise InvalidOptionError(option, f"must be at least {minimum}, not {number}")
    return number


def _duration_ms(option: str, value: str) -> int:
    """A time as Spark writes them ("15m", "30s", "500ms", "2h"; a bare number is milliseconds)."""
    match = re.fullmatch(r"\s*(\d+)\s*([a-z]*)\s*", value.lower())
    if match is None or match.group(2) not in ("", *TIME_UNITS_MS):
        raise InvalidOptionError(option, f"{value!r} is not a time such as 15m, 30s or 500ms")
    return int(int(match.group(1)) * TIME_UNITS_MS.get(match.group(2) or "ms", 1))


def _per_partition(option: str, value: str, *, allowed_specials: tuple[int, ...]) -> Offsets:
    """JSON {"topic": {"0": n, ...}, ...} with whole numbers ≥ 0, or the allowed specials."""
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as error:
        raise InvalidOptionError(option, f"not JSON: {error}") from None
    if not isinstance(parsed, dict) or not parsed:
        raise InvalidOptionError(option, 'must be a JSON object {"topic": {"partition": number}}')
    result: Offsets = {}
    for topic, partitions in parsed.items():
        if not isinstance(partitions, dict) or not partitions:
            raise InvalidOptionError(option, f"topic {topic!r}: must map partitions to numbers")
        result[topic] = {}
        for partition, number in partitions.items():
            if not str(partition).isdigit():
                raise InvalidOptionError(option, f"{topic}: partition {partition!r} is not a number")
            if (
                not isinstance(number, int)
                or isinstance(number, bool)
                or (number < 0 and number not in allowed_specials)
            ):
                specials = f" (or {', '.join(map(str, allowed_specials))})" if allowed_specials else ""
                raise InvalidOptionError(option, f"{topic}-{partition}: {number!r} is not an offset ≥ 0{specials}")
            result[topic][int(partition)] = number
    return result


def _assign(value: str) -> Offsets:
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as error:
        raise InvalidOptionError("assign", f"not JSON: {error}") from None
    if not isinstance(parsed, dict) or not parsed:
        raise InvalidOptionError("assign", 'must be a JSON object {"topic": [partitions]}')
    result: Offsets = {}
    for topic, partitions in parsed.items():
        if (
            not isinstance(partitions, list)
            or not partitions
            or not all(isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in partitions)
        ):
            raise InvalidOptionError("assign", f"topic {topic!r}: must list partition numbers ≥ 0")
        result[topic] = {partition: 0 for partition in partitions}
    return result


def read_options(options: Mapping[str, str], *, streaming: bool) -> ReadOptions:
    ours, client_settings, bootstrap = _split(options, READ_OPTIONS)
    chosen = [name for name in ("subscribe", "subscribePattern", "assign") if name in ours]
    if len(chosen) != 1:
        raise InvalidOptionError(
            chosen[1] if len(chosen) > 1 else "subscribe",
            "exactly one of subscribe, subscribePattern and assign is required"
            + (f" (given: {', '.join(chosen)})" if chosen else ""),
        )
    subscribe = tuple(topic.strip() for topic in ours.get("subscribe", "").split(",") if topic.strip())
    if "subscribe" in ours and not subscribe:
        raise InvalidOptionError("subscribe", "names no topic")
    pattern = ours.get("subscribePattern")
    if pattern is not None:
        try:
            re.compile(pattern)
        except re.error as error:
            raise InvalidOptionError("subscribePattern", f"not a regular expression: {error}") from None
    assign = _assign(ours["assign"]) if "assign" in ours else None

    starting: str | Offsets = "latest" if streaming else "earliest"
    if "startingOffsets" in ours:
        value = ours["startingOffsets"].strip()
        if value.lower() in ("earliest", "latest"):
            starting = value.lower()
        else:
            starting = _per_partition("startingOffsets", value, allowed_specials=(EARLIEST, LATEST))
        if not streaming and (
            starting == "latest"
            or (isinstance(starting, dict) and any(o == LATEST for p in starting.values() for o in p.values()))
        ):
            raise InvalidOptionError(
                "startingOffsets", "latest is not allowed in a batch query (it would read nothing)"
            )
    ending: str | Offsets = "latest"
    if "endingOffsets" in ours:
        if streaming:
            raise InvalidOptionError("endingOffsets", "not allowed in a streaming query")
        value = ours["endingOffsets"].strip()
        if value.lower() == "latest":
            ending = "latest"
        elif value.lower() == "earliest":
            raise InvalidOptionError("endingOffsets", "earliest is not allowed (it would read nothing)")
        else:
            ending = _per_partition("endingOffsets", value, allowed_specials=(LATEST,))
    if "endingOffsetsByTimestamp" in ours and streaming:
        raise InvalidOptionError("endingOffsetsByTimestamp", "not allowed in a streaming query")
    if "endingTimestamp" in ours and streaming:
        raise InvalidOptionError("endingTimestamp", "not allowed in a streaming query")
    # maxOffsetsPerTrigger, minOffsetsPerTrigger and maxTriggerDelay in a batch query are ignored,
    # as Spark's Kafka source ignores them there; they are still checked.
    starting_timestamp = None
    if "startingTimestamp" in ours:
        starting_timestamp = _positive("startingTimestamp", ours["startingTimestamp"])
    ending_timestamp = _positive("endingTimestamp", ours["endingTimestamp"]) if "endingTimestamp" in ours else None
    for unused in UNUSED_CLIENT_SETTINGS:
        client_settings.pop(unused, None)
    strategy = ours.get("startingOffsetsByTimestampStrategy", "error").lower()
    if strategy not in ("error", "latest"):
        raise InvalidOptionError("startingOffsetsByTimestampStrategy", "must be error or latest")
    return ReadOptions(
        bootstrap=bootstrap,
        subscribe=subscribe,
        subscribe_pattern=pattern,
        assign=assign,
        starting=starting,
        ending=ending,
        starting_timestamp=starting_timestamp,
        starting_by_timestamp_strategy=strategy,
        starting_by_timestamp=(
            _per_partition("startingOffsetsByTimestamp", ours["startingOffsetsByTimestamp"], allowed_specials=())
            if "startingOffsetsByTimestamp" in ours
            else None
        ),
        ending_by_timestamp=(
            _per_partition("endingOffsetsByTimestamp", ours["endingOffsetsByTimestamp"], allowed_specials=())
            if "endingOffsetsByTimestamp" in ours
            else None
        ),
        ending_timestamp=ending_timestamp,
        max_offsets_per_trigger=(
            _positive("maxOffsetsPerTrigger", ours["maxOffsetsPerTrigger"]) if "maxOffsetsPerTrigger" in ours else None
        ),
        min_offsets_per_trigger=(
            _positive("minOffsetsPerTrigger", ours["minOffsetsPerTrigger"]) if "minOffsetsPerTrigger" in ours else None
        ),
        max_trigger_delay_ms=(
            _duration_ms("maxTriggerDelay", ours["maxTriggerDelay"])
            if "maxTriggerDelay" in ours
            else MAX_TRIGGER_DELAY_MS_DEFAULT
        ),
        poll_timeout_ms=(
            _positive("kafkaConsumer.pollTimeoutMs", ours["kafkaConsumer.pollTimeoutMs"])
            if "kafkaConsumer.pollTimeoutMs" in ours
            else POLL_TIMEOUT_MS_DEFAULT
        ),
        fetch_offset_retries=(
            _whole("fetchOffset.numRetries", ours["fetchOffset.numRetries"], minimum=0)
            if "fetchOffset.numRetries" in ours
            else FETCH_OFFSET_RETRIES_DEFAULT
        ),
        fetch_offset_retry_interval_ms=(
            _whole("fetchOffset.retryIntervalMs", ours["fetchOffset.retryIntervalMs"], minimum=0)
            if "fetchOffset.retryIntervalMs" in ours
            else FETCH_OFFSET_RETRY_INTERVAL_MS_DEFAULT
        ),
        min_partitions=_positive("minPartitions", ours["minPartitions"]) if "minPartitions" in ours else None,
        max_records_per_partition=(
            _positive("maxRecordsPerPartition", ours["maxRecordsPerPartition"])
            if "maxRecordsPerPartition" in ours
            else None
        ),
        fail_on_data_loss=_bool("failOnDataLoss", ours.get("failOnDataLoss", "true")),
        include_headers=_bool("includeHeaders", ours.get("includeHeaders", "false")),
        client=_client(client_settings, Consumer.CONFIGS, ConsumerSettings.DEFINITIONS, "consumer"),
    )


def write_options(options: Mapping[str, str], *, streaming: bool = False) -> WriteOptions:
    ours, client_settings, bootstrap = _split(options, WRITE_OPTIONS)
    client = _client(client_settings, Producer.CONFIGS, ProducerSettings.DEFINITIONS, "producer")
    if client.get("acks", "all") not in ("all", "-1"):
        raise InvalidOptionError(
            "tidelog.acks", "the sink writes with acks=all (a record is acknowledged once in sync)"
        )
    if client.get("enable_idempotence") is False:
        raise InvalidOptionError(
            "tidelog.enable.idempotence", "the sink writes idempotently: a retried batch is not duplicated"
        )
    topic = ours.get("topic")
    if topic is not None and not topic.strip():
        raise InvalidOptionError("topic", "is empty")
    return WriteOptions(
        bootstrap=bootstrap,
        topic=topic,
        include_headers=_bool("includeHeaders", ours.get("includeHeaders", "false")),
        client=client,
        idempotent_retries=_bool("idempotentRetries", ours.get("idempotentRetries", "false")),
        exactly_once=_exactly_once(ours, client, streaming),
        fail_first_attempt_after=(
            _positive("failFirstAttemptAfterRecords", ours["failFirstAttemptAfterRecords"])
            if "failFirstAttemptAfterRecords" in ours
            else None
        ),
    )


def _exactly_once(ours: Mapping[str, str], client: Mapping[str, Any], streaming: bool) -> bool:
    if not _bool("exactlyOnce", ours.get("exactlyOnce", "false")):
        return False
    if not streaming:
        raise InvalidOptionError("exactlyOnce", "for streaming writes; a batch write takes idempotentRetries")
    if _bool("idempotentRetries", ours.get("idempotentRetries", "false")):
        raise InvalidOptionError("exactlyOnce", "and idempotentRetries exclude each other: choose one")
    if client.get("transactional_id"):
        raise InvalidOptionError("tidelog.transactional.id", "the exactly-once sink names its own transactional ids")
    return True
