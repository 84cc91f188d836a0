"""The typed settings built from the registry: flags, --config, properties files, bounds."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest

from tidelog.broker import main as broker_main
from tidelog.client import Consumer, GroupConsumer, Producer
from tidelog.client.assignors import ASSIGNORS
from tidelog.common.config import ALL_CONFIGS, ConfigScope, ConfigType
from tidelog.common.errors import InvalidConfigError
from tidelog.common.settings import (
    BrokerSettings,
    ConsumerSettings,
    ControllerSettings,
    CoordinatorSettings,
    GatewaySettings,
    OperatorSettings,
    ProducerSettings,
    Settings,
    attribute_of,
    read_properties,
    settings_of,
)
from tidelog.controller import main as controller_main
from tidelog.coordinator import main as coordinator_main
from tidelog.gateway import main as gateway_main

SCOPES: list[tuple[type[Settings], ConfigScope]] = [
    (BrokerSettings, ConfigScope.BROKER),
    (ControllerSettings, ConfigScope.CONTROLLER),
    (CoordinatorSettings, ConfigScope.COORDINATOR),
    (GatewaySettings, ConfigScope.GATEWAY),
    (OperatorSettings, ConfigScope.OPERATOR),
    (ProducerSettings, ConfigScope.PRODUCER),
    (ConsumerSettings, ConfigScope.CONSUMER),
]


@pytest.mark.parametrize(("settings", "scope"), SCOPES)
def test_every_setting_of_a_scope_is_a_typed_field_with_the_registry_default(
    settings: type[Settings], scope: ConfigScope
) -> None:
    defaults = settings.from_configs()
    definitions = [definition for definition in ALL_CONFIGS if definition.scope == scope]
    assert defaults.as_configs() == {definition.name: definition.default for definition in definitions}
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(defaults, attribute_of(definitions[0].name), definitions[0].default)


def test_a_settings_class_that_differs_from_the_registry_is_refused_at_definition() -> None:
    with pytest.raises(TypeError, match=r"missing \[.*'gateway_session_timeout_ms'.*unknown \['typo_ms'\]"):

        @settings_of(ConfigScope.GATEWAY)
        class _Missing(Settings):
            typo_ms: int

    fields = {d.name.replace(".", "_"): d for d in ALL_CONFIGS if d.scope == ConfigScope.CONTROLLER}
    wrong = {name: (str if d.type != ConfigType.STRING else int) for name, d in fields.items()}
    with pytest.raises(TypeError, match=r"controller\.session\.timeout\.ms is of type int"):
        settings_of(ConfigScope.CONTROLLER)(type("_Wrong", (Settings,), {"__annotations__": wrong}))


def test_flags_config_and_a_properties_file_override_in_that_order(tmp_path: Path) -> None:
    properties = tmp_path / "broker.properties"
    properties.write_text(
        "# a Kafka-style file\n! also a comment\n\nreplica.lag.time.max.ms=1500\n"
        "num.io.threads : 4\ncontrolled.shutdown.enable=false\nreplica.fetch.backoff.ms=7\n"
    )
    args = broker_main.parse_args(
        [
            *("--id", "1", "--port", "1", "--etcd", "e", "--data-dir", "d"),
            *("--config-file", str(properties)),
            *("--config", "num.io.threads=6", "--config", "replica.fetch.backoff.ms=9"),
            *("--replica-fetch-backoff-ms", "11"),
        ]
    )
    settings: BrokerSettings = args.settings
    assert settings.replica_lag_time_max_ms == 1500  # from the file
    assert settings.num_io_threads == 6  # --config over the file
    assert settings.replica_fetch_backoff_ms == 11  # the flag over both
    assert settings.controlled_shutdown_enable is False
    assert settings.fetch_max_bytes == 55 * 1024 * 1024  # the registry's default


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--replica-lag-time-max-ms", "5"], "replica.lag.time.max.ms: 5 is below the minimum 100"),
        (["--num-io-threads", "many"], "num.io.threads: 'many' is not a valid int"),
        (["--config", "no.such.setting=1"], "unknown config(s): no.such.setting"),
        (["--config", "num.io.threads"], "--config 'num.io.threads': expected NAME=VALUE"),
        (["--controlled-shutdown-enable", "yes"], "controlled.shutdown.enable: 'yes' is not a valid boolean"),
    ],
)
def test_a_bad_setting_stops_the_process_with_its_name(
    arguments: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        broker_main.parse_args(["--id", "1", "--port", "1", "--etcd", "e", "--data-dir", "d", *arguments])
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_every_process_takes_its_scope_and_only_its_scope() -> None:
    parsed = {
        "controller": controller_main.parse_args(["--id", "1", "--port", "1", "--etcd", "e"]),
        "coordinator": coordinator_main.parse_args(["--id", "1", "--port", "1", "--etcd", "e"]),
        "gateway": gateway_main.parse_args(["--id", "1", "--port", "1", "--etcd", "e"]),
    }
    assert parsed["controller"].settings == ControllerSettings.from_configs()
    assert parsed["coordinator"].settings == CoordinatorSettings.from_configs()
    assert parsed["gateway"].settings == GatewaySettings.from_configs()
    with pytest.raises(SystemExit):
        controller_main.parse_args(["--id", "1", "--port", "1", "--etcd", "e", "--num-io-threads", "2"])


def test_a_properties_line_without_a_separator_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "bad.properties"
    path.write_text("num.io.threads=2\njust-a-word\n")
    with pytest.raises(InvalidConfigError, match=r"bad.properties:2: expected NAME=VALUE"):
        read_properties(path)


def test_help_lists_every_setting_with_its_meaning() -> None:
    parser = argparse.ArgumentParser()
    BrokerSettings.add_arguments(parser)
    text = parser.format_help()
    for definition in BrokerSettings.DEFINITIONS:
        assert "--" + definition.name.replace(".", "-") in text


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Producer(["b:1"], linger_ms=-1), "linger.ms: -1 is below the minimum 0"),
        (lambda: Producer(["b:1"], acks="2"), "acks: '2' is not one of 0, 1, all, -1"),
        (lambda: Producer(["b:1"], batch_size=2 * 1024 * 1024), "batch.size=2097152 exceeds max.request.size"),
        (lambda: Consumer(["b:1"], auto_offset_reset="smallest"), "auto.offset.reset: 'smallest' is not one of"),
        (lambda: GroupConsumer(["b:1"], "g", partition_assignment_strategy=["fair"]), "'fair' is not one of"),
        (lambda: GroupConsumer(["b:1"], "g", heartbeat_interval_ms=0), "heartbeat.interval.ms: 0 is below"),
    ],
)
def test_clients_check_their_settings_against_the_registry(make: Callable[[], object], message: str) -> None:
    with pytest.raises(InvalidConfigError) as refused:
        make()
    assert message in str(refused.value)


def test_the_registry_offers_exactly_the_assignors_the_client_has() -> None:
    strategy = next(d for d in ConsumerSettings.DEFINITIONS if d.name == "partition.assignment.strategy")
    assert set(strategy.choices or ()) == set(ASSIGNORS)
