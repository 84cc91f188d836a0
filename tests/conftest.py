"""Suite-wide settings: hypothesis profiles sized for a 2-core CI machine."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile("default", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("thorough", max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


# ---- a real etcd server, shared by the tests of one session ------------------------------------

from collections.abc import Iterator  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

from tidelog.dev.etcd_server import EtcdServer  # noqa: E402


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
