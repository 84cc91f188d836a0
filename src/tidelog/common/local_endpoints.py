"""Where clients on this machine find the cluster `tidelog dev up` runs: the file it announces
itself in (per user), and a data folder's `cluster.json`. The dev cluster writes both
(`tidelog.dev.local_cluster`); the CLI and the Spark jobs read them, without importing the dev
tooling."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Final

__all__ = [
    "CLIENT_PROPERTIES",
    "AnnouncedCluster",
    "announce",
    "announced_cluster",
    "local_bootstrap",
    "saved_endpoints",
    "user_state_file",
]

CLIENT_PROPERTIES: Final = "client.properties"  # in the data folder, beside cluster.json


def user_state_file() -> Path:
    """$XDG_STATE_HOME/tidelog/local-cluster.json (~/.local/state/...): the running dev cluster."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "tidelog" / "local-cluster.json"


@dataclasses.dataclass(frozen=True)
class AnnouncedCluster:
    """What `tidelog dev up` announces: its data folder, its process, and its endpoints."""

    data_dir: str
    pid: int
    bootstrap: list[str]
    controllers: list[str]
    gateways: list[str]


def announce(cluster: AnnouncedCluster) -> None:
    """Write the announcement whole (a reader never sees half of it)."""
    path = user_state_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(dataclasses.asdict(cluster), indent=2))
    temporary.replace(path)


def announced_cluster() -> AnnouncedCluster | None:
    """The dev cluster this user runs, if its `tidelog dev up` still runs."""
    try:
        announced = AnnouncedCluster(**json.loads(user_state_file().read_text()))
        os.kill(announced.pid, 0)  # signal 0: is it alive
    except (OSError, ValueError, TypeError):
        return None
    return announced


def saved_endpoints(saved: Path) -> tuple[list[str], list[str]]:
    """(brokers, controllers) of the dev cluster whose `cluster.json` this is."""
    ports = json.loads(saved.read_text())
    return (
        [f"127.0.0.1:{port}" for port in ports["brokers"].values()],
        [f"127.0.0.1:{port}" for port in ports["controllers"].values()],
    )


def local_bootstrap(data_dir: Path = Path("data")) -> list[str] | None:
    """The brokers of the dev cluster whose state is under `data_dir` (./data), else of the one
    this user's `tidelog dev up` runs; None when neither (the caller says what it falls back to)."""
    saved = data_dir / "cluster.json"
    if saved.exists():
        return saved_endpoints(saved)[0]
    announced = announced_cluster()
    return None if announced is None else announced.bootstrap
