"""The Python runtime's figures that stand in for the JVM panels of Kafka dashboards (docs/monitoring.md):
what a Kafka broker's dashboards show as jvm_memory_used_bytes, jvm_gc_collection_seconds and
jvm_threads_current, a Tidelog process shows as

- memory: prometheus_client's `process_resident_memory_bytes` (already exported);
- GC: `tidelog_python_gc_pause_seconds{generation}`, each collection's pause timed by a
  `gc.callbacks` hook (prometheus_client's python_gc_* count collections, not their time);
- threads: `tidelog_process_threads`, the process's OS threads (gRPC's C threads and the I/O
  pools included, as the JVM's count includes its own) from /proc/self/status;
- and what a JVM has no counterpart for, the asyncio event loop's lag:
  `tidelog_event_loop_lag_seconds`, how late a timer wakes — a loop blocked by CPU work or a
  long callback delays every request the process serves.
"""

from __future__ import annotations

import asyncio
import gc
import threading
import time
from pathlib import Path
from typing import Any, Final

import structlog

from tidelog.server_common import long_lived_heap, metrics_catalog

__all__ = ["start"]

LAG_SAMPLE_S: Final = 0.5
GC_PAUSE_LOGGED_S: Final = 0.1  # a collection this long is logged too (a JVM's GC log would show it)
GC_BUCKETS: Final = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)
LAG_BUCKETS: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)

_GC_PAUSE: Final = metrics_catalog.histogram("tidelog_python_gc_pause_seconds", buckets=GC_BUCKETS)
_THREADS: Final = metrics_catalog.gauge("tidelog_process_threads")
_LOOP_LAG: Final = metrics_catalog.histogram("tidelog_event_loop_lag_seconds", buckets=LAG_BUCKETS)
log = structlog.get_logger(__name__)
_started: dict[int, float] = {}  # thread → when its collection began (a collection runs on one thread)
_tasks: set[asyncio.Task[None]] = set()


def _on_gc(phase: str, info: dict[str, Any]) -> None:
    thread = threading.get_ident()
    if phase == "start":
        _started[thread] = time.perf_counter()
    elif (began := _started.pop(thread, None)) is not None:
        pause = time.perf_counter() - began
        _GC_PAUSE.labels(str(info.get("generation", ""))).observe(pause)
        if pause >= GC_PAUSE_LOGGED_S:  # every request of the process waited this long
            log.warning(
                "gc_pause",
                generation=info.get("generation"),
                seconds=round(pause, 3),
                collected=info.get("collected"),
                frozen_objects=long_lived_heap.frozen_objects(),  # (gc.get_freeze_count() walks them all)
            )


def _threads() -> float:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Threads:"):
                return float(line.split()[1])
    except OSError:
        pass
    return float(threading.active_count())  # not Linux: the Python threads at least


async def _watch_loop_lag() -> None:
    loop = asyncio.get_running_loop()
    while True:
        expected = loop.time() + LAG_SAMPLE_S
        await asyncio.sleep(LAG_SAMPLE_S)
        _LOOP_LAG.observe(max(0.0, loop.time() - expected))


def start() -> None:
    """Install the GC hook and the thread gauge, and start the lag watch on the running loop."""
    if _on_gc not in gc.callbacks:
        gc.callbacks.append(_on_gc)
    _THREADS.set_function(_threads)
    task = asyncio.get_running_loop().create_task(_watch_loop_lag(), name="event-loop-lag")
    _tasks.add(task)
    task.add_done_callback(_tasks.discard)
