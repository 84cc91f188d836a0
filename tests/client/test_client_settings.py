"""The clients take their settings by the registry's names: every config a client says it takes
(`CONFIGS`, what the Spark source and the CLI map options by) is a keyword argument named as the
config's attribute, defaulting to the registry's default, and the settings object each client
builds holds what it was given."""

from __future__ import annotations

import inspect

import pytest

from tidelog.client import Consumer, GroupConsumer, Producer
from tidelog.common.config import ALL_CONFIGS
from tidelog.common.errors import InvalidConfigError
from tidelog.common.settings import ConsumerSettings, ProducerSettings, attribute_of

DEFAULTS = {definition.name: definition.default for definition in ALL_CONFIGS}


@pytest.mark.parametrize("client", [Producer, Consumer], ids=lambda client: client.__name__)
def test_every_config_a_client_takes_is_a_keyword_with_the_registry_default(client: type) -> None:
    parameters = inspect.signature(client.__init__).parameters
    for name in client.CONFIGS:
        parameter = parameters.get(attribute_of(name))
        assert parameter is not None, f"{client.__name__} takes {name} but has no {attribute_of(name)}"
        default = DEFAULTS[name]
        assert parameter.default == default or (name == "client.id" and parameter.default == ""), name


def test_the_producer_takes_every_producer_setting() -> None:
    assert {definition.name for definition in ProducerSettings.DEFINITIONS} == Producer.CONFIGS


async def test_the_settings_a_producer_builds_are_the_ones_it_runs_with() -> None:
    producer = Producer(["localhost:1"], linger_ms=42, acks="1", enable_idempotence=True)
    try:
        assert producer.settings.linger_ms == 42
        assert producer.accumulator.linger_s == 0.042
        assert producer.sender.settings is producer.settings
        assert producer.settings.required_acks == 1 and not producer.settings.idempotent  # needs acks=all
    finally:
        await producer.close()


async def test_a_consumer_keeps_its_settings_and_a_bad_one_is_named() -> None:
    consumer = Consumer(["localhost:1"], fetch_max_bytes=1 << 20, client_id="reader")
    try:
        assert consumer.settings == ConsumerSettings.from_configs({"fetch.max.bytes": 1 << 20, "client.id": "reader"})
    finally:
        await consumer.close()
    with pytest.raises(InvalidConfigError, match=r"fetch\.max\.bytes"):
        Consumer(["localhost:1"], fetch_max_bytes=-1)


async def test_a_group_consumer_passes_fetch_settings_through_its_one_settings_object() -> None:
    group = GroupConsumer(["localhost:1"], "g", max_partition_fetch_bytes=4096, session_timeout_ms=10_000)
    try:
        assert group.settings.max_partition_fetch_bytes == 4096 and group.settings.session_timeout_ms == 10_000
        assert group.consumer.settings.max_partition_fetch_bytes == 4096
    finally:
        await group.close()
    with pytest.raises(InvalidConfigError, match="unknown"):
        GroupConsumer(["localhost:1"], "g", fetch_max_wait=5)
