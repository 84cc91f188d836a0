"""The ports of a local cluster's processes, kept in its data folder (`cluster.json`) so that a
restarted `tidelog dev up` or test cluster takes the very same ones."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

from tidelog.dev.etcd_server import free_port, port_or_free

__all__ = ["CONVENTIONAL_PORTS", "ClusterPorts"]

# With conventional ports, the first start takes the ports Kafka's, REST Proxy's and etcd's docs use
# where they are free (the n-th instance next to the first), so their recipes work unchanged.
CONVENTIONAL_PORTS: Final = {
    "etcd_client": 2379,
    "etcd_peer": 2380,
    "brokers": 9292,  # the brokers' gRPC listeners
    "kafka": 9092,  # the brokers' Kafka-protocol listeners: Kafka's port, which its tools default to
    "controllers": 9190,
    "coordinators": 9300,
    "gateways": 8082,  # Confluent REST Proxy's
    "metrics": 9400,
}


def _numbered(saved: Mapping[str, int]) -> dict[int, int]:
    return {int(number): port for number, port in saved.items()}


@dataclasses.dataclass
class ClusterPorts:
    etcd_client: int
    etcd_peer: int
    brokers: dict[int, int]
    controllers: dict[int, int]
    metrics: dict[str, int]  # process name ("broker-1") → its metrics port
    coordinators: dict[int, int] = dataclasses.field(default_factory=dict)
    gateways: dict[int, int] = dataclasses.field(default_factory=dict)
    kafka: dict[int, int] = dataclasses.field(default_factory=dict)  # broker id → its Kafka listener's port

    @classmethod
    def load(cls, path: Path, roles: Mapping[str, Sequence[int]], *, conventional: bool) -> ClusterPorts:
        """The ports saved at `path`, with any process not there yet given one (and saved)."""

        def port(role: str, offset: int) -> int:
            return port_or_free(CONVENTIONAL_PORTS[role] + offset) if conventional else free_port()

        if path.exists():
            saved = json.loads(path.read_text())
            ports = cls(
                saved["etcd_client"],
                saved["etcd_peer"],
                _numbered(saved["brokers"]),
                _numbered(saved["controllers"]),
                saved.get("metrics", {}),
                _numbered(saved.get("coordinators", {})),
                _numbered(saved.get("gateways", {})),
                _numbered(saved.get("kafka", {})),
            )
        else:
            ports = cls(port("etcd_client", 0), port("etcd_peer", 0), {}, {}, {})
        metrics = iter(range(1000))
        for role, numbers in roles.items():
            held: dict[int, int] = getattr(ports, role)
            for number in numbers:
                if number not in held:
                    held[number] = port(role, number - 1)
                name = f"{role.removesuffix('s')}-{number}"
                if name not in ports.metrics:
                    ports.metrics[name] = port("metrics", next(metrics))
        for broker_id in roles.get("brokers", ()):
            if broker_id not in ports.kafka:
                ports.kafka[broker_id] = port("kafka", broker_id - 1)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(dataclasses.asdict(ports), indent=2))
        return ports
