"""A network of hosts on one machine, to cut, slow and drop what crosses it (issue 19).

Each host is a network namespace of its own, joined to a bridge in the test's namespace by a veth
pair; the test process itself sits on the bridge (the first address), so it reaches every host as
a client would. Faults are nftables rules inside a host's namespace (drop everything from or to
another host, in one direction or both; drop a random share of packets) and a `tc` token bucket on
the host's link (a rate limit). This kernel has no netem, so added latency comes from
`DelayProxy`, a userspace TCP relay a broker is advertised behind.

Needs root, `ip` (iproute2), `nft` (nftables) and `tc`: `network_unavailable()` says what is
missing, for a skip with the reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import secrets
import shutil
import subprocess
from collections.abc import Iterator

from tidelog.dev.local_cluster import Placement

SUBNET = "10.213.{}"  # a /24 per network: rarely in use on a test machine


def network_unavailable() -> str:
    """Why this machine cannot build a test network ("" when it can)."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "nft", "tc"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed (scripts/install-system-deps installs it as root)"
    probe = f"tlprobe{secrets.token_hex(3)}"
    try:
        _run("ip", "netns", "add", probe)
        _run("ip", "netns", "exec", probe, "nft", "add", "table", "inet", "probe")
    except RuntimeError as error:
        return f"cannot create a network namespace with nftables here: {error}"
    finally:
        subprocess.run(["ip", "netns", "del", probe], capture_output=True, check=False)
    return ""


def _run(*command: str) -> None:
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)}: {result.stderr.strip() or result.returncode}")


class Network:
    """Hosts by name ("broker-1", "etcd") on one bridge; `heal()` removes every fault."""

    def __init__(self) -> None:
        self.token = secrets.token_hex(2)  # names unique to this network: parallel runs do not meet
        self.subnet = SUBNET.format(random.randrange(1, 250))
        self.bridge = f"tlbr{self.token}"
        self.client_address = f"{self.subnet}.1"  # the test process, on the bridge
        self.hosts: dict[str, tuple[str, str, str]] = {}  # name → (namespace, address, bridge-side link)
        _run("ip", "link", "add", self.bridge, "type", "bridge")
        _run("ip", "addr", "add", f"{self.client_address}/24", "dev", self.bridge)
        _run("ip", "link", "set", self.bridge, "up")

    def add_host(self, name: str) -> Placement:
        number = len(self.hosts) + 2
        namespace = f"tl{self.token}-{name}"
        address = f"{self.subnet}.{number}"
        outside, inside = f"tl{self.token}o{number}", f"tl{self.token}i{number}"
        _run("ip", "netns", "add", namespace)
        _run("ip", "link", "add", outside, "type", "veth", "peer", "name", inside)
        _run("ip", "link", "set", inside, "netns", namespace)
        _run("ip", "link", "set", outside, "master", self.bridge)
        _run("ip", "link", "set", outside, "up")
        _run("ip", "-n", namespace, "addr", "add", f"{address}/24", "dev", inside)
        _run("ip", "-n", namespace, "link", "set", inside, "up")
        _run("ip", "-n", namespace, "link", "set", "lo", "up")
        self.hosts[name] = (namespace, address, outside)
        self._reset_rules(name)
        return Placement(namespace, address)

    def address(self, name: str) -> str:
        return self.client_address if name == "client" else self.hosts[name][1]

    # ---- faults -----------------------------------------------------------------------------

    def _nft(self, host: str, *rule: str) -> None:
        _run("ip", "netns", "exec", self.hosts[host][0], "nft", *rule)

    def _reset_rules(self, host: str) -> None:
        self._nft(host, "add", "table", "inet", "fault")
        self._nft(host, "flush", "table", "inet", "fault")
        for chain, hook in (("in", "input"), ("out", "output")):
            self._nft(host, "add", "chain", "inet", "fault", chain, f"{{ type filter hook {hook} priority 0 ; }}")

    def drop(self, source: str, destination: str) -> None:
        """Packets from `source` to `destination` are lost (one direction only: replies still flow,
        but a TCP connection needs both, so this stalls every conversation between them)."""
        if source in self.hosts:
            self._nft(source, "add", "rule", "inet", "fault", "out", "ip", "daddr", self.address(destination), "drop")
        if destination in self.hosts:
            self._nft(destination, "add", "rule", "inet", "fault", "in", "ip", "saddr", self.address(source), "drop")

    def cut(self, side_a: list[str], side_b: list[str]) -> None:
        """Nothing crosses between the two sides, either way."""
        for a in side_a:
            for b in side_b:
                self.drop(a, b)
                self.drop(b, a)

    def lose(self, host: str, percent: int) -> None:
        """A random `percent` of the host's packets, in and out, are lost."""
        for chain in ("in", "out"):
            rule = ["numgen", "random", "mod", "100", "<", str(percent), "drop"]
            self._nft(host, "add", "rule", "inet", "fault", chain, *rule)

    def limit_rate(self, host: str, kbit: int) -> None:
        """What the host sends is shaped to `kbit` (a token bucket on its link)."""
        namespace, _, _ = self.hosts[host]
        link = f"tl{self.token}i{list(self.hosts).index(host) + 2}"
        _run("ip", "netns", "exec", namespace, "tc", "qdisc", "replace", "dev", link, "root", "tbf",
             "rate", f"{kbit}kbit", "burst", "32kbit", "latency", "400ms")  # fmt: skip

    def heal(self) -> None:
        for host in self.hosts:
            self._reset_rules(host)
            namespace, _, _ = self.hosts[host]
            link = f"tl{self.token}i{list(self.hosts).index(host) + 2}"
            subprocess.run(["ip", "netns", "exec", namespace, "tc", "qdisc", "del", "dev", link, "root"],
                           capture_output=True, check=False)  # fmt: skip

    def close(self) -> None:
        for namespace, _, outside in self.hosts.values():
            subprocess.run(["ip", "link", "del", outside], capture_output=True, check=False)
            subprocess.run(["ip", "netns", "del", namespace], capture_output=True, check=False)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True, check=False)
        self.hosts.clear()


@contextlib.contextmanager
def network(names: list[str]) -> Iterator[tuple[Network, dict[str, Placement]]]:
    net = Network()
    try:
        yield net, {name: net.add_host(name) for name in names}
    finally:
        net.close()


class DelayProxy:
    """A TCP relay that holds every chunk it forwards for `delay_ms` ± `jitter_ms` (in order: a
    chunk never overtakes the one before it, as on a real link). Listens at `listen`, forwards to
    `target`; `delay_ms` may change while it runs."""

    def __init__(self, listen: tuple[str, int], target: tuple[str, int], delay_ms: float = 0, jitter_ms: float = 0):
        self.listen = listen
        self.target = target
        self.delay_ms = delay_ms
        self.jitter_ms = jitter_ms
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, *self.listen)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        for source, sink in ((reader, upstream_writer), (upstream_reader, writer)):
            task = asyncio.create_task(self._pipe(source, sink))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _pipe(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def deliver() -> None:
            while True:
                due, chunk = await queue.get()
                if not chunk:
                    break
                await asyncio.sleep(max(0.0, due - loop.time()))
                sink.write(chunk)
                await sink.drain()

        delivering = asyncio.create_task(deliver())
        try:
            while chunk := await source.read(65536):
                delay = max(0.0, self.delay_ms + random.uniform(-self.jitter_ms, self.jitter_ms)) / 1000
                await queue.put((loop.time() + delay, chunk))
            await queue.put((0.0, b""))
            await delivering
        except (OSError, asyncio.IncompleteReadError):
            delivering.cancel()
        finally:
            sink.close()
