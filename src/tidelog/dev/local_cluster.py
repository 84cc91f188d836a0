"""A whole Tidelog cluster on this machine as real child processes: etcd, controllers, brokers,
group coordinators, REST gateways.

Used by `tidelog dev up` and by the cluster tests, so both exercise the same processes. Everything
lives under one data folder: etcd's data, each broker's logs, each process's log file
(`logs/<name>.log`, JSON lines), and `cluster.json` with the ports chosen on the first start, so a
restart on the same folder comes back on the same endpoints with the same data.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Final

import grpc
from etcd3aio import prefix_range_end
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tidelog.client.admin import AdminClient
from tidelog.common.local_endpoints import AnnouncedCluster, announce, announced_cluster, user_state_file
from tidelog.common.settings import SecuritySettings
from tidelog.dev import fork_server
from tidelog.dev.cluster_ports import ClusterPorts
from tidelog.dev.etcd_server import EtcdCluster, EtcdServer, EtcdTls
from tidelog.server_common.etcd.connect import etcd_client
from tidelog.server_common.metadata import (
    CONSUMER_OFFSETS_TOPIC,
    COORDINATOR_INSTANCES_PREFIX,
    COORDINATOR_PARTITIONS_PREFIX,
    TRANSACTION_STATE_TOPIC,
    TXN_COORDINATOR_PARTITIONS_PREFIX,
    CoordinatorClaimRecord,
    CoordinatorInstanceRecord,
    coordinator_claim_key,
    coordinator_owner_of,
)
from tidelog.server_common.security.authentication.credential_store import seed_users
from tidelog.v1 import broker_pb2

__all__ = ["LocalCluster", "Placement"]

READY_TIMEOUT_S: Final = 60.0
OFFSETS_REPLICATION_FACTOR: Final = 3  # offsets.topic.replication.factor, lowered to a smaller cluster's size
STOP_TIMEOUT_S: Final = 15.0
GRACEFUL: Final = signal.SIGTERM  # (in the class body `signal` is the method of that name)
# The gRPC service whose health a broker marks SERVING once registered.
BROKER_SERVICE: Final = broker_pb2.DESCRIPTOR.services_by_name["Broker"].full_name


@dataclasses.dataclass(frozen=True)
class Placement:
    """Where one process runs when not on loopback: in a network namespace of its own (the fault
    tests cut, slow and drop the traffic between such hosts), listening at `address` there.
    `advertised` ("host:port") is where the others are told to reach it instead: a proxy in the
    path that delays what crosses it (brokers only)."""

    namespace: str
    address: str
    advertised: str | None = None


class LocalCluster:
    def __init__(
        self,
        data_dir: Path,
        *,
        brokers: int = 3,
        controllers: int = 2,
        session_timeout_ms: int = 6000,
        metrics: bool = False,
        broker_log_configs: dict[str, str] | None = None,
        broker_args: list[str] | None = None,
        controller_args: list[str] | None = None,
        coordinators: int = 0,
        coordinator_args: list[str] | None = None,
        gateways: int = 0,
        gateway_args: list[str] | None = None,
        conventional_ports: bool = False,
        announce: bool = False,
        service_security: Callable[[str], Mapping[str, str]] | None = None,
        client_security: SecuritySettings | None = None,
        scram_users: Mapping[str, str] | None = None,
        etcd_members: int = 1,
        etcd_tls: EtcdTls | None = None,
        etcd_client_security: SecuritySettings | None = None,
        placements: Mapping[str, Placement] | None = None,
        environments: Mapping[str, Mapping[str, str]] | None = None,
        gateway_tls: bool = False,
        kafka_listeners: bool | None = None,
    ) -> None:
        self.data_dir = data_dir.resolve()
        self.broker_ids = list(range(1, brokers + 1))
        self.controller_ids = list(range(1, controllers + 1))
        self.session_timeout_ms = session_timeout_ms
        self.metrics = metrics
        self.broker_log_configs = dict(broker_log_configs or {})
        self.broker_args = list(broker_args or [])
        self.controller_args = list(controller_args or [])
        self.coordinator_ids = list(range(1, coordinators + 1))
        self.coordinator_args = list(coordinator_args or [])
        self.gateway_ids = list(range(1, gateways + 1))
        self.gateway_args = list(gateway_args or [])
        self.conventional_ports = conventional_ports
        self.announce = announce  # tell every `tidelog` command of this user where the cluster is
        self.ports = self._load_ports()
        # Process name ("broker-2", "etcd") → where it runs; the others run on loopback.
        self.placements = dict(placements or {})
        # Process name → variables added to its environment (a fault test's LD_PRELOAD, say).
        self.environments = {name: dict(variables) for name, variables in (environments or {}).items()}
        assert "etcd" not in self.placements or etcd_members == 1, "only a one-member etcd is placed"
        self.etcd: EtcdServer | EtcdCluster = (
            EtcdServer(
                self.data_dir / "etcd",
                client_port=self.ports.etcd_client,
                peer_port=self.ports.etcd_peer,
                host=self.host_of("etcd"),
                command_prefix=self._command_prefix("etcd"),
                tls=etcd_tls,
            )
            if etcd_members == 1
            else EtcdCluster(self.data_dir / "etcd", etcd_members, etcd_tls)  # a quorum that survives a loss
        )
        # How this object's own etcd clients (user seeding, readiness checks) reach an etcd on TLS;
        # the services have theirs in their own security settings (etcd.ssl.*).
        self.etcd_client_security = etcd_client_security
        self.processes: dict[str, subprocess.Popen[bytes] | fork_server.ForkedProcess] = {}
        # Per process ("broker-1"): its security settings (its own certificate, the CA, ...); and
        # what this object's own clients (readiness checks) use.
        self.service_security = service_security
        self.client_security = client_security
        self.scram_users = dict(scram_users or {})  # written to etcd before any service starts
        self.gateway_tls = gateway_tls  # the gateways serve HTTPS (their rest.ssl.* settings)
        # Each broker's Kafka-protocol listener (secured as the broker's gRPC listener is).
        self.kafka_listeners = True if kafka_listeners is None else kafka_listeners

    def _load_ports(self) -> ClusterPorts:
        roles = {
            "brokers": self.broker_ids,
            "controllers": self.controller_ids,
            "coordinators": self.coordinator_ids,
            "gateways": self.gateway_ids,
        }
        return ClusterPorts.load(self.data_dir / "cluster.json", roles, conventional=self.conventional_ports)

    def _announce(self) -> None:
        """Where the cluster is, in the user's state file: `tidelog` commands run from any folder
        find it there (the CLI's --bootstrap, then ./data, then this, then localhost:9092)."""
        announce(
            AnnouncedCluster(
                data_dir=str(self.data_dir),
                pid=os.getpid(),
                bootstrap=self.bootstrap,
                controllers=self.controller_endpoints,
                gateways=self.gateway_urls,
            )
        )

    # ---- endpoints -------------------------------------------------------------------------

    def host_of(self, name: str) -> str:
        """The address a process listens on: its placement's, else loopback."""
        placement = self.placements.get(name)
        return "127.0.0.1" if placement is None else placement.address

    def _command_prefix(self, name: str) -> list[str]:
        placement = self.placements.get(name)
        return [] if placement is None else ["ip", "netns", "exec", placement.namespace]

    @property
    def bootstrap(self) -> list[str]:
        return [self.broker_endpoint(broker_id) for broker_id in self.broker_ids]

    def broker_endpoint(self, broker_id: int) -> str:
        """Where clients reach the broker (its advertised address)."""
        placement = self.placements.get(f"broker-{broker_id}")
        if placement is not None and placement.advertised:
            return placement.advertised
        return f"{self.host_of(f'broker-{broker_id}')}:{self.ports.brokers[broker_id]}"

    @property
    def kafka_bootstrap(self) -> str:
        """The brokers' Kafka listeners as Kafka's clients take them: `host:port,host:port`."""
        assert self.kafka_listeners, "this cluster's brokers have no Kafka listener"
        return ",".join(f"{self.host_of(f'broker-{number}')}:{self.ports.kafka[number]}" for number in self.broker_ids)

    @property
    def controller_endpoints(self) -> list[str]:
        return [
            f"{self.host_of(f'controller-{number}')}:{self.ports.controllers[number]}" for number in self.controller_ids
        ]

    def metrics_endpoint(self, name: str) -> str:
        return f"http://{self.host_of(name)}:{self.ports.metrics[name]}/metrics"

    # ---- processes -------------------------------------------------------------------------

    def _spawn(self, name: str, module: str, arguments: list[str]) -> None:
        logs = self.data_dir / "logs"
        logs.mkdir(exist_ok=True)
        environment = {**os.environ, "PYTHONUNBUFFERED": "1", **self.environments.get(name, {})}
        if fork_server.enabled() and not self._command_prefix(name) and name not in self.environments:
            # Forked from a process that imported the services already (ADR 0034); one in a
            # network namespace or with variables of its own (LD_PRELOAD) is exec'd as before.
            self.processes[name] = fork_server.shared().spawn(module, arguments, environment, logs / f"{name}.log")
            return
        with open(logs / f"{name}.log", "ab") as output:
            self.processes[name] = subprocess.Popen(
                [*self._command_prefix(name), sys.executable, "-m", module, *arguments],
                stdout=output,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=environment,
                # Own session: a terminal's Ctrl-C reaches only `dev up`, which stops them in order.
                start_new_session=True,
            )

    def _start_service(self, kind: str, service_id: int, port: int, extra: list[str]) -> None:
        """Every service takes the same core flags: its id, port, etcd, session and metrics port."""
        name = f"{kind}-{service_id}"
        arguments = [
            "--id",
            str(service_id),
            "--port",
            str(port),
            "--etcd",
            self.etcd.endpoint,
            f"--{kind}-session-timeout-ms",  # broker.session.timeout.ms, controller.session.timeout.ms, ...
            str(self.session_timeout_ms),
        ]
        if self.metrics:
            arguments += ["--metrics-port", str(self.ports.metrics[name])]
        if (placement := self.placements.get(name)) is not None:
            arguments += ["--host", placement.address]
            if placement.advertised:
                host, advertised_port = placement.advertised.rsplit(":", 1)
                arguments += ["--advertised-host", host, "--advertised-port", advertised_port]
        if self.service_security is not None:
            for setting, value in self.service_security(name).items():
                arguments += ["--config", f"{setting}={value}"]
        self._spawn(name, f"tidelog.{kind}.main", arguments + extra)

    def start_broker(self, broker_id: int) -> None:
        extra = ["--data-dir", str(self.data_dir / f"broker-{broker_id}")]
        extra += ["--broker-readiness-file", str(self.readiness_file(broker_id))]
        for name, value in self.broker_log_configs.items():
            extra += ["--log-config", f"{name}={value}"]
        if self.kafka_listeners:
            extra += ["--listeners", f"KAFKA://{self.host_of(f'broker-{broker_id}')}:{self.ports.kafka[broker_id]}"]
        self._start_service("broker", broker_id, self.ports.brokers[broker_id], extra + self.broker_args)

    def readiness_file(self, broker_id: int) -> Path:
        """The file the broker keeps while it is ready (as its pod's readiness probe reads it)."""
        return self.data_dir / f"broker-{broker_id}.ready"

    def broker_ready(self, broker_id: int) -> bool:
        """Ready for the next broker to restart: running, and no partition it hosts under-replicated
        (a killed broker leaves its file behind; its next life removes it first)."""
        process = self.processes.get(f"broker-{broker_id}")
        return process is not None and process.poll() is None and self.readiness_file(broker_id).exists()

    def start_controller(self, controller_id: int) -> None:
        self._start_service("controller", controller_id, self.ports.controllers[controller_id], self.controller_args)

    def start_coordinator(self, coordinator_id: int) -> None:
        port = self.ports.coordinators[coordinator_id]
        extra = list(self.coordinator_args)
        factor = str(min(OFFSETS_REPLICATION_FACTOR, len(self.broker_ids)))
        for option in ("--offsets-topic-replication-factor", "--transaction-state-log-replication-factor"):
            if option not in extra:  # as Kafka's single-broker dev configs
                extra += [option, factor]
        self._start_service("coordinator", coordinator_id, port, extra)

    @property
    def coordinator_endpoints(self) -> list[str]:
        return [
            f"{self.host_of(f'coordinator-{number}')}:{self.ports.coordinators[number]}"
            for number in self.coordinator_ids
        ]

    def start_gateway(self, gateway_id: int) -> None:
        self._start_service("gateway", gateway_id, self.ports.gateways[gateway_id], self.gateway_args)

    @property
    def gateway_urls(self) -> list[str]:
        return [
            f"{'https' if self.gateway_tls else 'http'}://{self.host_of(f'gateway-{number}')}:{self.ports.gateways[number]}"
            for number in self.gateway_ids
        ]

    def start(self) -> None:
        if self.announce:
            self._announce()
        self.etcd.start()
        if self.scram_users:
            # In a thread of its own: start() is also called from inside running event loops.
            with concurrent.futures.ThreadPoolExecutor(1) as seeding:
                seeding.submit(
                    asyncio.run,
                    seed_users(etcd_client(self.etcd.endpoint, self.etcd_client_security), self.scram_users),
                ).result()
        for controller_id in self.controller_ids:
            self.start_controller(controller_id)
        for broker_id in self.broker_ids:
            self.start_broker(broker_id)
        for coordinator_id in self.coordinator_ids:
            self.start_coordinator(coordinator_id)
        for gateway_id in self.gateway_ids:
            self.start_gateway(gateway_id)

    def signal(self, name: str, signal_number: int = signal.SIGKILL) -> int | None:
        """Send a signal to one process ("broker-2", "controller-1").

        For SIGKILL and SIGTERM, waits for the exit and returns the exit code.
        """
        process = self.processes[name]
        process.send_signal(signal_number)
        if signal_number in (signal.SIGKILL, signal.SIGTERM):
            code = process.wait(timeout=STOP_TIMEOUT_S)
            del self.processes[name]
            return code
        return None

    def names(self, role: str) -> list[str]:
        """The running processes of a role ("broker", "controller", "coordinator", "gateway")."""
        return sorted(
            (name for name in self.processes if name.startswith(f"{role}-")), key=lambda n: int(n.split("-")[1])
        )

    def start_process(self, name: str) -> None:
        """Start one process by name ("broker-2"), on the ports and data it had."""
        role, number = name.rsplit("-", 1)
        starters = {
            "broker": self.start_broker,
            "controller": self.start_controller,
            "coordinator": self.start_coordinator,
            "gateway": self.start_gateway,
        }
        if role not in starters:
            raise ValueError(f"no such role {role!r}: one of {sorted(starters)}")
        if name in self.processes and self.processes[name].poll() is None:
            raise ValueError(f"{name} is running")
        starters[role](int(number))

    def restart(self, name: str, signal_number: int = GRACEFUL) -> None:
        """Stop one process (SIGTERM: gracefully; SIGKILL: a crash) and start it again (a coordinator's
        new life waits for the old one's claims to expire, which `wait_ready` names)."""
        self.signal(name, signal_number)
        self.start_process(name)

    def stop(self) -> None:
        """SIGTERM gateways (their consumers leave their groups), then coordinators (they write through
        brokers), then brokers (they hand leadership away, deregister and flush, which needs a
        controller), then the controllers, then etcd."""
        gateways = sorted(name for name in self.processes if name.startswith("gateway"))
        coordinators = sorted(name for name in self.processes if name.startswith("coordinator"))
        brokers = sorted(name for name in self.processes if name.startswith("broker"))
        others = sorted(name for name in self.processes if name not in {*gateways, *coordinators, *brokers})
        for group in (gateways, coordinators, brokers, others):
            for name in group:
                if self.processes[name].poll() is None:
                    self.processes[name].send_signal(signal.SIGCONT)  # a stopped process cannot act on SIGTERM
                    self.processes[name].send_signal(signal.SIGTERM)
            deadline = time.monotonic() + STOP_TIMEOUT_S
            for name in group:
                process = self.processes.pop(name)
                try:
                    process.wait(timeout=max(deadline - time.monotonic(), 0.1))
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
        self.etcd.stop()
        if self.announce:
            announced = announced_cluster()
            if announced is not None and Path(announced.data_dir) == self.data_dir:
                user_state_file().unlink(missing_ok=True)

    # ---- readiness -------------------------------------------------------------------------

    async def wait_ready(self, timeout_s: float = READY_TIMEOUT_S, brokers: list[int] | None = None) -> None:
        """Until a controller is active and sees every wanted broker registered, each serving (a
        new life, not the registration a killed one left behind), the coordinators settled and
        the gateways listening."""

        wanted = set(self.broker_ids if brokers is None else brokers)
        deadline = time.monotonic() + timeout_s
        last = "nothing answered"
        async with AdminClient(
            self.bootstrap,
            controllers=self.controller_endpoints,
            request_timeout_ms=2000,
            security=self.client_security,
        ) as admin:
            while time.monotonic() < deadline:
                self.check_alive()
                try:
                    cluster = await admin.describe_cluster()
                    live = {broker.broker_id for broker in cluster.brokers}
                    if not wanted <= live:
                        last = f"brokers {sorted(wanted - live)} not registered (live: {sorted(live)})"
                    elif starting := await self._brokers_not_serving(admin, wanted):
                        # Registered, yet (after a kill -9 and a start) maybe the dead life's
                        # registration, whose lease or the controller's probe is about to drop it.
                        last = f"brokers {starting} registered but not serving yet (a new life starting)"
                    elif self.coordinator_ids and (waiting := await self._coordinators_waiting(admin)):
                        last = waiting
                    elif not await self._gateways_serve():
                        last = "a gateway does not accept connections yet"
                    else:
                        return
                except Exception as error:  # not up yet: keep waiting until the deadline
                    last = str(error)
                await asyncio.sleep(0.1)
        raise TimeoutError(f"cluster not ready after {timeout_s} s: {last}")

    async def _brokers_not_serving(self, admin: AdminClient, wanted: set[int]) -> list[int]:
        """The wanted brokers whose gRPC health does not say SERVING for the broker service: a
        broker says so only once it has registered (runtime.py marks it serving after its start;
        the server-wide "" is SERVING from the first moment), so a life that answers holds the
        registration the controller sees, or is taking it over without a gap."""
        waiting = []
        for broker_id in sorted(wanted):
            stub = health_pb2_grpc.HealthStub(admin.connections.channel(self.broker_endpoint(broker_id)))
            try:
                answer = await stub.Check(health_pb2.HealthCheckRequest(service=BROKER_SERVICE), timeout=1.0)
            except grpc.aio.AioRpcError:
                waiting.append(broker_id)
                continue
            if answer.status != health_pb2.HealthCheckResponse.SERVING:
                waiting.append(broker_id)
        return waiting

    async def _gateways_serve(self) -> bool:
        for url in self.gateway_urls:
            host, port = url.partition("://")[2].rsplit(":", 1)
            try:
                _, writer = await asyncio.open_connection(host, int(port))
            except OSError:
                return False
            writer.close()
            await writer.wait_closed()
        return True

    async def _coordinators_waiting(self, admin: AdminClient) -> str:
        """What the coordinators still wait for ("" once every one is registered and every
        partition of __consumer_offsets and __transaction_state is claimed by the instance meant to
        own it)."""
        topics = (CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC)
        described = await admin.describe_topics(list(topics))
        etcd = etcd_client(self.etcd.endpoint, self.etcd_client_security)
        await etcd.connect()
        try:
            assert etcd.kv is not None
            prefix = COORDINATOR_INSTANCES_PREFIX.encode()
            instances = sorted(
                CoordinatorInstanceRecord.from_json(kv.value).instance_id
                for kv in (await etcd.kv.get(prefix, prefix_range_end(prefix))).kvs
            )
            if instances != self.coordinator_ids:
                return f"coordinators registered: {instances}, wanted {self.coordinator_ids}"
            for topic, claims_prefix in zip(
                topics, (COORDINATOR_PARTITIONS_PREFIX, TXN_COORDINATOR_PARTITIONS_PREFIX), strict=True
            ):
                if isinstance(found := described[topic], Exception):
                    return f"{topic} not created yet"
                claims = [
                    (await etcd.kv.get(coordinator_claim_key(p, claims_prefix))).kvs
                    for p in range(len(found.partitions))
                ]
                owners = [
                    CoordinatorClaimRecord.from_json(claim[0].value).instance_id if claim else -1 for claim in claims
                ]
                if unsettled := [p for p, owner in enumerate(owners) if owner != coordinator_owner_of(p, instances)]:
                    # A coordinator restarted within its session of the last life waits for that
                    # life's claims to expire: say so, rather than wait in silence.
                    return (
                        f"{topic} partitions {unsettled} not yet claimed by their owners "
                        f"(claims of a stopped life expire within the session timeout, {self.session_timeout_ms} ms)"
                    )
            return ""
        finally:
            await etcd.close()

    def check_alive(self) -> None:
        """Raise if any process of the cluster has exited, etcd's too: one that lost the race for its
        port exits while another may answer there, and services sharing that etcd look ready."""
        for name, process in self.processes.items():
            if process.poll() is not None:
                raise RuntimeError(f"{name} exited with {process.returncode}; see {self.data_dir}/logs/{name}.log")
        for member in self.etcd.members if isinstance(self.etcd, EtcdCluster) else [self.etcd]:
            if member.process is not None and member.process.poll() is not None:
                raise RuntimeError(f"etcd exited with {member.process.returncode}; see {member.data_dir}.log")
