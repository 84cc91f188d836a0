"""`listeners` / `advertised.listeners` in Kafka's syntax: `NAME://host:port,...`."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Final

from tidelog.common.errors import InvalidConfigError

__all__ = ["KAFKA_LISTENER", "ListenerSpec", "kafka_listener"]

KAFKA_LISTENER: Final = "KAFKA"  # the one listener name served so far: Kafka's protocol, PLAINTEXT
ANY_ADDRESS: Final = ("0.0.0.0", "::", "")


@dataclasses.dataclass(frozen=True, slots=True)
class ListenerSpec:
    name: str
    host: str
    port: int

    @classmethod
    def parse(cls, text: str, setting: str) -> ListenerSpec:
        name, separator, address = text.partition("://")
        host, colon, port = address.rpartition(":")
        if not separator or not colon or not name:
            raise InvalidConfigError(f"{setting}: {text!r} is not NAME://host:port")
        try:
            number = int(port)
        except ValueError:
            raise InvalidConfigError(f"{setting}: {text!r} has no port number") from None
        if not 0 <= number <= 65535:
            raise InvalidConfigError(f"{setting}: port {number} is out of range")
        return cls(name.upper(), host.strip("[]"), number)


def _by_name(entries: Iterable[str], setting: str) -> dict[str, ListenerSpec]:
    specs: dict[str, ListenerSpec] = {}
    for entry in entries:
        spec = ListenerSpec.parse(entry, setting)
        if spec.name != KAFKA_LISTENER:
            raise InvalidConfigError(
                f"{setting}: listener {spec.name!r}: only {KAFKA_LISTENER}:// is served (the gRPC listener is "
                "--host/--port)"
            )
        if spec.name in specs:
            raise InvalidConfigError(f"{setting}: {spec.name} is named twice")
        specs[spec.name] = spec
    return specs


def kafka_listener(
    listeners: Iterable[str], advertised: Iterable[str], advertised_host: str
) -> tuple[ListenerSpec, ListenerSpec | None] | None:
    """The Kafka listener to bind and, when given, where clients are told it is (None: its own
    address once bound, 0.0.0.0 replaced by `advertised_host`); None without a Kafka listener."""
    bound = _by_name(listeners, "listeners").get(KAFKA_LISTENER)
    told = _by_name(advertised, "advertised.listeners").get(KAFKA_LISTENER)
    if bound is None:
        if told is not None:
            raise InvalidConfigError("advertised.listeners names KAFKA, which listeners does not")
        return None
    return bound, told


def advertised_address(
    bound: ListenerSpec, told: ListenerSpec | None, port: int, advertised_host: str
) -> tuple[str, int]:
    """(host, port) clients are told for a listener bound at `port` (the real one, for port 0)."""
    if told is not None:
        return told.host, told.port
    return (advertised_host if bound.host in ANY_ADDRESS else bound.host), port
