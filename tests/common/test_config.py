from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from tidelog.broker import main as broker_main
from tidelog.broker.broker_service import FETCH_BYTES_MAX, FETCH_WAIT_MS_MAX
from tidelog.client import Consumer, GroupConsumer, Producer
from tidelog.common.config import ALL_CONFIGS, LOG_CONFIGS, ConfigScope, parse_configs, render_markdown
from tidelog.common.errors import ErrorCode, InvalidConfigError
from tidelog.common.runtime import GRPC_MESSAGE_BYTES_MAX
from tidelog.controller import main as controller_main
from tidelog.controller.controller_config import ControllerConfig
from tidelog.coordinator import main as coordinator_main
from tidelog.coordinator.group_coordinator import CoordinatorConfig
from tidelog.gateway import main as gateway_main

ROOT = Path(__file__).resolve().parents[2]


def test_defaults_follow_kafka() -> None:
    parsed = parse_configs({}, LOG_CONFIGS)
    assert parsed["segment.bytes"] == 1024**3
    assert parsed["retention.ms"] == 7 * 24 * 3_600_000
    assert parsed["cleanup.policy"] == ("delete",)
    assert parsed["max.message.bytes"] == 1024 * 1024 + 12


def test_strings_are_converted_and_checked() -> None:
    parsed = parse_configs(
        {"segment.bytes": "8192", "cleanup.policy": "compact, delete", "min.cleanable.dirty.ratio": "0.1"},
        LOG_CONFIGS,
    )
    assert parsed["segment.bytes"] == 8192
    assert parsed["cleanup.policy"] == ("compact", "delete")
    assert parsed["min.cleanable.dirty.ratio"] == 0.1


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"segment.bytes": "12"}, "below the minimum"),
        ({"segment.bytes": "lots"}, "not a valid int"),
        ({"segment.bytes": True}, "not a valid int"),
        ({"min.cleanable.dirty.ratio": "1.5"}, "above the maximum"),
        ({"cleanup.policy": "shred"}, "not one of"),
        ({"cleanup.policy": ""}, "at least one"),
        ({"message.timestamp.type": "Now"}, "not one of"),
        ({"no.such.config": "1"}, "unknown config"),
    ],
)
def test_bad_values_are_invalid_config(raw: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidConfigError, match=message) as caught:
        parse_configs(raw, LOG_CONFIGS)
    assert caught.value.code == ErrorCode.INVALID_CONFIG


def test_configuration_reference_is_generated_from_the_definitions() -> None:
    documented = (ROOT / "docs" / "configuration.md").read_text()
    assert documented == render_markdown(), "run: python -m tidelog.common.config > docs/configuration.md"


def _default(name: str, scope: ConfigScope | None = None) -> object:
    return next(
        definition.default
        for definition in ALL_CONFIGS
        if definition.name == name and (scope is None or definition.scope == scope)
    )


def _signature_defaults(function: object) -> dict[str, object]:
    return {
        name: parameter.default
        for name, parameter in inspect.signature(function).parameters.items()  # type: ignore[arg-type]
        if parameter.default is not inspect.Parameter.empty
    }


@pytest.mark.parametrize(
    ("client", "scope"),
    [(Producer, ConfigScope.PRODUCER), (Consumer, ConfigScope.CONSUMER), (GroupConsumer, ConfigScope.CONSUMER)],
)
def test_client_defaults_are_the_registry_defaults(client: type, scope: ConfigScope) -> None:
    for argument, value in _signature_defaults(client).items():
        name = argument.replace("_", ".")
        if name in {"connections"}:
            continue
        assert str(value) == str(_default(name, scope)), name


def test_process_defaults_are_the_registry_defaults() -> None:
    broker = broker_main.parse_args(["--id", "1", "--port", "1", "--etcd", "e", "--data-dir", "d"])
    assert broker.session_timeout_ms == _default("broker.session.timeout.ms")
    assert broker.io_threads == _default("num.io.threads")
    assert broker.flush_interval_ms == _default("log.flush.scheduler.interval.ms")
    assert broker.retention_check_interval_ms == _default("log.retention.check.interval.ms")
    assert broker.producer_id_expiration_ms == _default("producer.id.expiration.ms")
    assert broker.controlled_shutdown_enable == str(_default("controlled.shutdown.enable")).lower()
    assert broker.controlled_shutdown_max_retries == _default("controlled.shutdown.max.retries")
    assert broker.controlled_shutdown_retry_backoff_ms == _default("controlled.shutdown.retry.backoff.ms")
    controller = controller_main.parse_args(["--id", "1", "--port", "1", "--etcd", "e"])
    assert controller.session_timeout_ms == _default("controller.session.timeout.ms")
    assert controller.num_partitions == _default("num.partitions")
    assert controller.default_replication_factor == _default("default.replication.factor")
    assert controller.delete_topic_enable == str(_default("delete.topic.enable")).lower()
    assert controller.auto_leader_rebalance_enable == str(_default("auto.leader.rebalance.enable")).lower()
    assert controller.leader_imbalance_check_interval_seconds == _default("leader.imbalance.check.interval.seconds")
    assert controller.leader_imbalance_per_broker_percentage == _default("leader.imbalance.per.broker.percentage")
    coordinator = coordinator_main.parse_args(["--id", "1", "--port", "1", "--etcd", "e"])
    assert coordinator.session_timeout_ms == _default("coordinator.session.timeout.ms")
    assert coordinator.offsets_topic_num_partitions == _default("offsets.topic.num.partitions")
    assert coordinator.offsets_topic_replication_factor == _default("offsets.topic.replication.factor")
    assert coordinator.group_min_session_timeout_ms == _default("group.min.session.timeout.ms")
    assert coordinator.group_max_session_timeout_ms == _default("group.max.session.timeout.ms")
    assert coordinator.group_initial_rebalance_delay_ms == _default("group.initial.rebalance.delay.ms")
    assert coordinator.offsets_retention_minutes == _default("offsets.retention.minutes")
    assert coordinator.group_max_size == _default("group.max.size")
    assert CoordinatorConfig() == CoordinatorConfig(
        partition_count=coordinator.offsets_topic_num_partitions,
        min_session_timeout_ms=coordinator.group_min_session_timeout_ms,
        max_session_timeout_ms=coordinator.group_max_session_timeout_ms,
        initial_rebalance_delay_ms=coordinator.group_initial_rebalance_delay_ms,
        offsets_retention_ms=coordinator.offsets_retention_minutes * 60_000,
        max_members=coordinator.group_max_size,
    )
    gateway = gateway_main.parse_args(["--id", "1", "--port", "1", "--etcd", "e"])
    assert gateway.consumer_instance_timeout_ms == _default("consumer.instance.timeout.ms")
    assert gateway.consumer_request_timeout_ms == _default("consumer.request.timeout.ms")
    assert gateway.consumer_request_max_bytes == _default("consumer.request.max.bytes")
    assert gateway.consumer_instances_max == _default("consumer.instances.max")
    assert gateway.rest_request_max_bytes == _default("rest.request.max.bytes")
    assert gateway.produce_records_max == _default("produce.records.max")
    assert _default("socket.request.max.bytes") == GRPC_MESSAGE_BYTES_MAX
    assert _default("fetch.max.bytes") == FETCH_BYTES_MAX
    assert _default("fetch.max.wait.ms.max") == FETCH_WAIT_MS_MAX
    assert ControllerConfig(controller_id=1, endpoint="e").broker_request_timeout_s * 1000 == _default(
        "controller.socket.timeout.ms"
    )
