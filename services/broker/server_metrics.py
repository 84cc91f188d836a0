"""A broker's process figures that Kafka's dashboards read, under Kafka's names: how idle its
network thread and its I/O pool are, how many bytes it read and wrote on disk, how many clients
are connected. Computed at scrape time (a text source of tidelog.server_common.metrics_http) from what
the kernel and the pool record, never estimated:

- network thread idle (Kafka's NetworkProcessorAvgIdlePercent): the asyncio event loop reads,
  decodes and answers every gRPC request, as Kafka's network processors do; its idle fraction is
  1 minus the loop thread's CPU time over the window (`pthread_getcpuclockid`);
- request handler idle (RequestHandlerAvgIdlePercent): the I/O pool (`num.io.threads`) runs
  appends, reads and flushes, as Kafka's request handlers do; idle is 1 minus the time its threads
  spent running work over the window times the thread count;
- disk bytes as Kafka's LinuxIoMetricsCollector: `/proc/self/io` read_bytes and write_bytes;
- connections: established TCP connections to the broker's gRPC port (`/proc/net/tcp{,6}`, read
  every 5 s off the scrape's path).

Windows are at least IDLE_WINDOW_S long: a scrape within one of the last sees the same figure.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

from tidelog.server_common.metrics_http import add_text_source, family_text

__all__ = ["BusyMeter", "ConnectionCount", "IdleWindow", "ServerCollector", "register"]

IDLE_WINDOW_S: Final = 1.0
CONNECTIONS_SAMPLE_S: Final = 5.0
LISTENER: Final = "GRPC"  # the listener name on connection_count (Kafka's listener names; issue 35 adds KAFKA)
ESTABLISHED: Final = "01"  # /proc/net/tcp's st column


class BusyMeter:
    """Seconds a pool's threads spent running work, added from those threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._busy = 0.0

    def add(self, seconds: float) -> None:
        with self._lock:
            self._busy += seconds

    def total(self) -> float:
        with self._lock:
            return self._busy


class IdleWindow:
    """1 minus busy time over capacity (threads × wall time) during the last window."""

    def __init__(self, busy_seconds: Callable[[], float], threads: int) -> None:
        assert threads >= 1
        self.busy_seconds = busy_seconds
        self.threads = threads
        self._lock = threading.Lock()  # scrapes may run on several HTTP threads at once
        self._at = time.monotonic()
        self._busy = busy_seconds()
        self._idle = 1.0

    def value(self) -> float:
        with self._lock:
            now = time.monotonic()
            if now - self._at >= IDLE_WINDOW_S:
                busy = self.busy_seconds()
                used = (busy - self._busy) / ((now - self._at) * self.threads)
                self._idle = min(1.0, max(0.0, 1.0 - used))
                self._at, self._busy = now, busy
            return self._idle


def _proc_io() -> dict[str, int]:
    try:
        lines = Path("/proc/self/io").read_text().splitlines()
    except OSError:  # not Linux, or not readable: no figure rather than a false one
        return {}
    return {key: int(value) for key, value in (line.split(": ", 1) for line in lines)}


def _established_to(port: int) -> int:
    wanted = f":{port:04X}"
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) > 3 and fields[3] == ESTABLISHED and fields[1].endswith(wanted):
                count += 1
    return count


class ConnectionCount:
    """Established connections to a port, counted on a thread of its own after a scrape asked, at
    most every CONNECTIONS_SAMPLE_S: the kernel walks its whole socket table to write /proc/net/tcp
    (10 ms for 700 sockets here, 38 ms for 1,300 on a busy machine), too slow for the scrape itself,
    and a broker nobody scrapes counts nothing (sampling every 5 s regardless cost each broker ~1 %
    of a core on a busy machine). A scrape reads the count the previous one asked for."""

    def __init__(self, port: int) -> None:
        self.port = port
        self._count = _established_to(port)
        self._asked = threading.Event()
        threading.Thread(target=self._sample, name="connection-count", daemon=True).start()

    @property
    def count(self) -> int:
        self._asked.set()
        return self._count

    def _sample(self) -> None:
        while True:
            self._asked.wait()
            self._asked.clear()
            self._count = _established_to(self.port)
            time.sleep(CONNECTIONS_SAMPLE_S)


class ServerCollector:
    def __init__(self, io_busy: BusyMeter, io_threads: int, port: int, loop_thread: int) -> None:
        clock = time.pthread_getcpuclockid(loop_thread)
        self.network_idle = IdleWindow(lambda: time.clock_gettime(clock), 1)
        self.io_idle = IdleWindow(io_busy.total, io_threads)
        self.connections = ConnectionCount(port)

    def text(self) -> str:
        parts = [
            family_text(
                "kafka_network_socketserver_networkprocessoravgidle_percent", [("", self.network_idle.value())]
            ),
            family_text(
                "kafka_server_kafkarequesthandlerpool_requesthandleravgidle_percent", [("", self.io_idle.value())]
            ),
            family_text(
                "kafka_server_socket_server_metrics_connection_count",
                [(f'{{listener="{LISTENER}"}}', self.connections.count)],
            ),
        ]
        io = _proc_io()
        if io:
            parts.append(family_text("kafka_server_kafkaserver_linux_disk_read_bytes", [("", io["read_bytes"])]))
            parts.append(family_text("kafka_server_kafkaserver_linux_disk_write_bytes", [("", io["write_bytes"])]))
        return "".join(parts)


def register(io_busy: BusyMeter, io_threads: int, port: int) -> ServerCollector:
    """Called on the event loop's thread: that thread's CPU time is the network thread's."""
    collector = ServerCollector(io_busy, io_threads, port, threading.get_ident())
    add_text_source(collector.text)
    return collector
