"""Suite-wide settings: hypothesis profiles sized for a 2-core CI machine, and how a parallel run
(scripts/test: pytest-xdist, `-n 3`) shares the machine between its workers (ADRs 0031, 0035)."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile("default", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("thorough", max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

# Local clusters fork their services from one helper that imported them once (ADR 0034): the suite
# starts about 490 services, each 0.35-0.8 s of imports otherwise. TIDELOG_DEV_FORK_SERVER=0 turns
# it off for a run.
os.environ.setdefault("TIDELOG_DEV_FORK_SERVER", "1")


# ---- a real etcd server, shared by the tests of one session ------------------------------------

from collections.abc import Iterator  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import pytest  # noqa: E402

from tidelog.dev.etcd_server import EtcdServer, port_range  # noqa: E402


@pytest.fixture(scope="session")
def etcd_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdServer]:
    server = EtcdServer(Path(tmp_path_factory.mktemp("etcd")) / "data")
    server.start()
    yield server
    server.stop()


from collections.abc import AsyncIterator  # noqa: E402

from etcd3aio import Etcd3Client  # noqa: E402


@pytest.fixture
async def etcd_client(etcd_server: EtcdServer) -> AsyncIterator[Etcd3Client]:
    """A connected client of the shared etcd server."""
    etcd = Etcd3Client([etcd_server.endpoint])
    await etcd.connect()
    yield etcd
    await etcd.close()


# ---- a parallel run (pytest-xdist) ---------------------------------------------------------------

# Test modules that run on one worker, one after another, whatever the parallelism: `tidelog dev up`
# takes Kafka's, REST Proxy's and etcd's conventional ports when free (two at once would race for
# them), and the Spark tests share one Spark session per worker (a JVM's start is ~10 s).
SERIAL_GROUPS = {
    "tests/test_cli.py": "dev-up",
    "tests/docs/test_docs.py": "dev-up",
    "tests/spark/": "spark",
}
# Handed out first, the longest first (a minute or more each on one worker): what starts last
# decides when the run ends.
LONGEST_FIRST = ("tests/faults/", "tests/test_cli.py", "tests/docs/test_docs.py", "tests/spark/", "tests/operator/")


def _module(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def _group(nodeid: str) -> str:
    """The unit a worker is handed: a test's module, or the serial group the module is in."""
    module = _module(nodeid)
    return next((name for prefix, name in SERIAL_GROUPS.items() if module.startswith(prefix)), module)


def pytest_configure(config: pytest.Config) -> None:
    """Each worker of a parallel run picks its clusters' ports (free_port) from a range of its own:
    two workers that probed the same port free at once would both bind it."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")  # "gw0", "gw1", ... in a parallel run
    if worker.startswith("gw") and "TIDELOG_DEV_PORTS" not in os.environ:
        index, workers = int(worker[2:]), int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
        first, last = port_range()
        width = (last - first + 1) // workers
        low = first + index * width
        os.environ["TIDELOG_DEV_PORTS"] = f"{low}-{low + width - 1}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The longest modules first (a stable sort: each module's tests keep their order)."""

    def rank(item: pytest.Item) -> int:
        module = _module(item.nodeid)
        return next((i for i, prefix in enumerate(LONGEST_FIRST) if module.startswith(prefix)), len(LONGEST_FIRST))

    items.sort(key=rank)


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which would pick its --dist mode's
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Each module, or serial group, handed to one worker whole with its fixtures (clusters among
    them), in the order collected. (xdist's own `--dist loadgroup` reads groups from test ids it
    rewrites, which pytest 9.2 no longer lets it do: pytest-dev/pytest-xdist#1386.)"""
    from xdist.scheduler import LoadScopeScheduling  # noqa: PLC0415 (only in a parallel run)

    class ModuleScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _group(nodeid)

    return ModuleScheduling(config, log)
