"""Typed, frozen settings per scope, built from the registry in `config.py`.

The registry is the only place a setting's name, default, bounds and meaning are written. A
scope's settings class lists only typed fields, named as the configs with dots as underscores
(`replica.lag.time.max.ms` → `replica_lag_time_max_ms`); `settings_of(scope)` checks when the
class is defined that its fields and the scope's definitions match one to one, with matching
types, so neither can drift from the other. Each class then gives:

- `from_configs({"replica.lag.time.max.ms": "1000"})`: checked values (an InvalidConfigError naming
  the setting when a value is unknown, malformed or out of bounds), defaults for the rest;
- `add_arguments(parser)`: a flag per setting (`--replica-lag-time-max-ms`), `--config NAME=VALUE`
  (repeatable) and `--config-file PATH` (a Java properties file, as Kafka's server.properties),
  all generated from the definitions;
- `from_arguments(namespace)`: defaults, overridden by the file, by `--config`, then by the flags.
"""

from __future__ import annotations

import argparse
import dataclasses
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar, Final, TypeVar, dataclass_transform

from tidelog.common.config import ALL_CONFIGS, ConfigDef, ConfigScope, ConfigType, ConfigValue, parse_configs
from tidelog.common.errors import InvalidConfigError
from tidelog.common.security.protocol import SecurityProtocol

__all__ = [
    "ACKS",
    "BrokerSettings",
    "ConsumerSettings",
    "ControllerSettings",
    "CoordinatorSettings",
    "GatewaySettings",
    "OperatorSettings",
    "ProducerSettings",
    "SecuritySettings",
    "Settings",
    "attribute_of",
    "client_keywords",
    "flag_of",
    "parse_process_args",
    "read_properties",
    "settings_of",
]

_PYTHON_TYPES: Final[dict[ConfigType, object]] = {
    ConfigType.INT: int,
    ConfigType.LONG: int,
    ConfigType.DOUBLE: float,
    ConfigType.STRING: str,
    ConfigType.BOOLEAN: bool,
    ConfigType.LIST: tuple[str, ...],
}
_OVERRIDES: Final = "settings_overrides"
_FILE: Final = "settings_file"
_SCOPES: Final = "settings_scopes"  # the scopes whose flags one parser carries (they share --config)

S = TypeVar("S", bound="Settings")


def attribute_of(name: str) -> str:
    """The Python name of a config: `replica.lag.time.max.ms` → `replica_lag_time_max_ms`."""
    return name.replace(".", "_")


def client_keywords(
    configs: Mapping[str, object], accepted: frozenset[str], definitions: tuple[ConfigDef, ...], scope: str
) -> dict[str, ConfigValue]:
    """Kafka-named client settings (`{"linger.ms": "5"}`) → a client's keyword arguments (each
    config's attribute name: `linger_ms=5`), checked by the registry. `accepted`: the configs the
    client takes (its CONFIGS); any other name, or a bad value, is an InvalidConfigError naming it.
    How the Spark source and the CLI's --producer-property / --consumer-property pass settings on."""
    for name in configs:
        if name not in accepted:
            raise InvalidConfigError(f"{name}: not a {scope} setting (docs/configuration.md)")
    parsed = parse_configs(configs, definitions)
    return {attribute_of(name): parsed[name] for name in configs}


def flag_of(name: str) -> str:
    """The command-line flag of a config: `replica.lag.time.max.ms` → `--replica-lag-time-max-ms`."""
    return "--" + name.replace(".", "-")


def read_properties(path: Path) -> dict[str, str]:
    """A Java-style properties file: `name=value` or `name: value` lines, `#` and `!` comments."""
    values: dict[str, str] = {}
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped[0] in "#!":
            continue
        separator = min((index for index in (stripped.find("="), stripped.find(":")) if index > 0), default=-1)
        if separator < 0:
            raise InvalidConfigError(f"{path}:{number}: expected NAME=VALUE, got {stripped!r}")
        values[stripped[:separator].strip()] = stripped[separator + 1 :].strip()
    return values


class Settings:
    """Base of the per-scope settings classes; see `settings_of`."""

    __slots__ = ()
    SCOPE: ClassVar[ConfigScope]
    DEFINITIONS: ClassVar[tuple[ConfigDef, ...]]

    @classmethod
    def from_configs(cls: type[S], raw: Mapping[str, object] | None = None) -> S:
        values = parse_configs(raw or {}, cls.DEFINITIONS)
        return cls(**{attribute_of(name): value for name, value in values.items()})

    def as_configs(self) -> dict[str, ConfigValue]:
        return {definition.name: getattr(self, attribute_of(definition.name)) for definition in self.DEFINITIONS}

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        group = parser.add_argument_group(f"{cls.SCOPE.value} settings (docs/configuration.md)")
        for definition in cls.DEFINITIONS:
            default = definition.default
            shown = ",".join(default) if isinstance(default, tuple) else str(default).lower()
            group.add_argument(
                flag_of(definition.name),
                dest=f"setting:{definition.name}",
                metavar=definition.type.value.upper(),
                help=f"{definition.name}: {definition.doc} (default {shown})",
            )
        scopes = parser.get_default(_SCOPES) or ()
        parser.set_defaults(**{_SCOPES: (*scopes, cls.SCOPE)})
        if scopes:  # a second scope on the same parser (e.g. a broker's security settings)
            return
        group.add_argument(
            "--config",
            action="append",
            default=[],
            dest=_OVERRIDES,
            metavar="NAME=VALUE",
            help="any setting of this process by its config name (repeatable)",
        )
        group.add_argument("--config-file", dest=_FILE, metavar="PATH", help="a properties file of NAME=VALUE lines")

    @classmethod
    def from_arguments(cls: type[S], arguments: argparse.Namespace) -> S:
        raw: dict[str, object] = {}
        path = getattr(arguments, _FILE, None)
        if path:
            raw.update(read_properties(Path(path)))
        for item in getattr(arguments, _OVERRIDES, []):
            name, separator, value = item.partition("=")
            if not separator:
                raise InvalidConfigError(f"--config {item!r}: expected NAME=VALUE")
            raw[name.strip()] = value.strip()
        # Names of the other scopes this parser carries are theirs to check; any other name is
        # still refused as unknown.
        others = {
            d.name for d in ALL_CONFIGS if d.scope in (getattr(arguments, _SCOPES, None) or ()) and d.scope != cls.SCOPE
        }
        raw = {name: value for name, value in raw.items() if name not in others}
        for definition in cls.DEFINITIONS:
            value = getattr(arguments, f"setting:{definition.name}", None)
            if value is not None:
                raw[definition.name] = value
        return cls.from_configs(raw)

    @classmethod
    def parse_into(cls: type[S], parser: argparse.ArgumentParser, arguments: argparse.Namespace) -> S:
        """`from_arguments`, with a bad setting reported as argparse reports a bad flag (exit 2)."""
        try:
            return cls.from_arguments(arguments)
        except (InvalidConfigError, OSError) as error:
            parser.error(str(error))


def parse_process_args(
    parser: argparse.ArgumentParser, scope: type[Settings], argv: list[str] | None = None
) -> argparse.Namespace:
    """The end of every service process's `parse_args`: the flags of its scope and of security,
    parsed and checked into `args.settings` and `args.security` (a bad value: argparse's exit 2)."""
    scope.add_arguments(parser)
    SecuritySettings.add_arguments(parser)
    args = parser.parse_args(argv)
    args.settings = scope.parse_into(parser, args)
    args.security = SecuritySettings.parse_into(parser, args)
    return args


@dataclass_transform(kw_only_default=True, frozen_default=True)
def settings_of(scope: ConfigScope) -> Callable[[type[S]], type[S]]:
    """Make a frozen dataclass of `scope`'s settings; fail at import if it and the registry differ."""
    definitions = tuple(definition for definition in ALL_CONFIGS if definition.scope == scope)

    def build(cls: type[S]) -> type[S]:
        hints: dict[str, Any] = typing.get_type_hints(cls)
        fields = {name: hint for name, hint in hints.items() if not name.isupper()}
        wanted = {attribute_of(definition.name): definition for definition in definitions}
        if set(fields) != set(wanted):
            raise TypeError(
                f"{cls.__name__} must have exactly the {scope.value} settings: "
                f"missing {sorted(set(wanted) - set(fields))}, unknown {sorted(set(fields) - set(wanted))}"
            )
        for name, hint in fields.items():
            if hint != _PYTHON_TYPES[wanted[name].type]:
                raise TypeError(f"{cls.__name__}.{name}: {wanted[name].name} is of type {wanted[name].type.value}")
        cls.SCOPE = scope
        cls.DEFINITIONS = definitions
        return dataclasses.dataclass(frozen=True, slots=True, kw_only=True)(cls)

    return build


@settings_of(ConfigScope.BROKER)
class BrokerSettings(Settings):
    """The broker's settings (docs/configuration.md)."""

    metrics_partition_series_max: int
    broker_session_timeout_ms: int
    broker_readiness_file: str
    num_io_threads: int
    log_flush_scheduler_interval_ms: int
    log_retention_check_interval_ms: int
    socket_request_max_bytes: int
    listeners: tuple[str, ...]
    advertised_listeners: tuple[str, ...]
    max_connections: int
    connections_max_idle_ms: int
    fetch_max_bytes: int
    fetch_max_wait_ms_max: int
    replica_lag_time_max_ms: int
    replica_fetch_wait_max_ms: int
    max_incremental_fetch_session_cache_slots: int
    replica_fetch_max_bytes: int
    replica_fetch_response_max_bytes: int
    replica_fetch_backoff_ms: int
    controlled_shutdown_enable: bool
    controlled_shutdown_max_retries: int
    controlled_shutdown_retry_backoff_ms: int
    producer_id_expiration_ms: int
    transaction_partition_verification_enable: bool
    quota_window_num: int
    quota_window_size_seconds: int
    quota_throttle_max_ms: int


@settings_of(ConfigScope.CONTROLLER)
class ControllerSettings(Settings):
    """The controller's settings (docs/configuration.md)."""

    controller_metrics_exporter_refresh_ms: int
    controller_metrics_partition_series_max: int
    controller_session_timeout_ms: int
    num_partitions: int
    default_replication_factor: int
    delete_topic_enable: bool
    controller_socket_timeout_ms: int
    controller_broker_liveness_probe_enable: bool
    auto_leader_rebalance_enable: bool
    leader_imbalance_check_interval_seconds: float
    leader_imbalance_per_broker_percentage: int


@settings_of(ConfigScope.COORDINATOR)
class CoordinatorSettings(Settings):
    """The coordinator's settings (docs/configuration.md)."""

    coordinator_session_timeout_ms: int
    offsets_topic_num_partitions: int
    offsets_topic_replication_factor: int
    group_min_session_timeout_ms: int
    group_max_session_timeout_ms: int
    group_initial_rebalance_delay_ms: int
    offsets_retention_minutes: int
    group_max_size: int
    transaction_state_log_num_partitions: int
    transaction_state_log_replication_factor: int
    transaction_max_timeout_ms: int
    transactional_id_expiration_ms: int
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int


@settings_of(ConfigScope.GATEWAY)
class GatewaySettings(Settings):
    """The gateway's settings (docs/configuration.md)."""

    gateway_session_timeout_ms: int
    consumer_instance_timeout_ms: int
    consumer_request_timeout_ms: int
    consumer_request_max_bytes: int
    consumer_instances_max: int
    rest_request_max_bytes: int
    produce_records_max: int
    producer_linger_ms: int
    authentication_method: str
    rest_principal_propagation_enable: bool
    rest_forwarded_trusted_proxies: tuple[str, ...]
    rest_principal_clients_max: int
    rest_ssl_certificate_location: str
    rest_ssl_key_location: str
    rest_ssl_ca_location: str
    rest_ssl_client_auth: str


@settings_of(ConfigScope.OPERATOR)
class OperatorSettings(Settings):
    """The operator's settings (docs/configuration.md)."""

    operator_reconcile_interval_ms: int
    operator_request_timeout_ms: int
    operator_retry_backoff_ms: int
    operator_retry_backoff_max_ms: int
    operator_peering_lifetime_ms: int


@settings_of(ConfigScope.SECURITY)
class SecuritySettings(Settings):
    """How a process secures its listener and its channels (docs/security.md)."""

    security_protocol: str
    ssl_certificate_location: str
    ssl_key_location: str
    ssl_ca_location: str
    metrics_host: str
    metrics_ssl_certificate_location: str
    metrics_ssl_key_location: str
    metrics_ssl_ca_location: str
    metrics_bearer_token_file: str
    etcd_ssl_ca_location: str
    etcd_ssl_certificate_location: str
    etcd_ssl_key_location: str
    ssl_client_auth: str
    ssl_principal_mapping_rules: str
    sasl_mechanism: str
    sasl_username: str
    sasl_password: str
    connections_max_reauth_ms: int
    authorizer_class_name: str
    super_users: str
    allow_everyone_if_no_acl_found: bool
    controller_principals: str
    broker_principals: str
    coordinator_principals: str
    gateway_principals: str

    def __repr__(self) -> str:  # never print a password (logs, tracebacks)
        shown = {**self.as_configs(), "sasl.password": "***" if self.sasl_password else ""}
        return f"SecuritySettings({shown})"

    @property
    def protocol(self) -> SecurityProtocol:
        return SecurityProtocol(self.security_protocol)

    @property
    def tls(self) -> bool:
        return self.protocol is not SecurityProtocol.PLAINTEXT

    @staticmethod
    def principals(value: str) -> frozenset[str]:
        """A ';'-separated list of principals (super.users, *.principals): a DN holds commas."""
        return frozenset(item.strip() for item in value.split(";") if item.strip())


ACKS: Final = {"0": 0, "1": 1, "all": -1, "-1": -1}  # `acks` as a produce request carries it


@settings_of(ConfigScope.PRODUCER)
class ProducerSettings(Settings):
    """The producer's settings (docs/configuration.md)."""

    acks: str
    enable_idempotence: bool
    transactional_id: str
    transaction_timeout_ms: int
    batch_size: int
    linger_ms: int
    compression_type: str
    buffer_memory: int
    max_request_size: int
    retries: int
    retry_backoff_ms: int
    delivery_timeout_ms: int
    request_timeout_ms: int
    max_in_flight_requests_per_connection: int
    max_block_ms: int

    @property
    def required_acks(self) -> int:
        """`acks` as a produce request carries it: -1 (all), 0 or 1."""
        return ACKS[self.acks]

    @property
    def idempotent(self) -> bool:
        """Idempotence needs acks=all; with other acks it is off (as Kafka >= 3.0 does when unset)."""
        return self.enable_idempotence and self.required_acks == -1


@settings_of(ConfigScope.CONSUMER)
class ConsumerSettings(Settings):
    """The consumer's settings (docs/configuration.md)."""

    auto_offset_reset: str
    isolation_level: str
    fetch_min_bytes: int
    fetch_max_wait_ms: int
    fetch_max_bytes: int
    max_partition_fetch_bytes: int
    request_timeout_ms: int
    retry_backoff_ms: int
    client_id: str
    group_instance_id: str
    session_timeout_ms: int
    heartbeat_interval_ms: int
    max_poll_interval_ms: int
    max_poll_records: int
    enable_auto_commit: bool
    auto_commit_interval_ms: int
    partition_assignment_strategy: tuple[str, ...]
