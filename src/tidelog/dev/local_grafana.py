"""Grafana for `tidelog dev up`, when a Grafana server is installed on the machine: provisioned with
the local Prometheus as its data source and Tidelog's dashboards (helm/tidelog/files/dashboards),
anonymous viewing on. Grafana cannot be installed from this project's package registries, so it is
optional: without it `tidelog dev up` says so in one line and goes on.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Final

import yaml

from tidelog.dev import child_process

DASHBOARDS: Final = Path(__file__).resolve().parents[3] / "helm" / "tidelog" / "files" / "dashboards"

__all__ = ["LocalGrafana"]

HOMEPATHS: Final = (Path("/usr/share/grafana"), Path("/usr/local/share/grafana"))


class LocalGrafana:
    def __init__(self, data_dir: Path, port: int, prometheus_url: str) -> None:
        self.data_dir = data_dir
        self.port = port
        self.prometheus_url = prometheus_url
        self.process: subprocess.Popen[bytes] | None = None

    @staticmethod
    def binary() -> str | None:
        return shutil.which("grafana") or shutil.which("grafana-server")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def provision(self) -> Path:
        """Grafana's provisioning folder: the data source and a dashboard provider for our files."""
        root = self.data_dir / "provisioning"
        (root / "datasources").mkdir(parents=True, exist_ok=True)
        (root / "dashboards").mkdir(parents=True, exist_ok=True)
        datasource = {
            "apiVersion": 1,
            "datasources": [
                {
                    "name": "Prometheus",
                    "type": "prometheus",
                    "uid": "prometheus",
                    "url": self.prometheus_url,
                    "access": "proxy",
                    "isDefault": True,
                }
            ],
        }
        (root / "datasources" / "tidelog.yaml").write_text(yaml.safe_dump(datasource, sort_keys=False))
        provider = {
            "apiVersion": 1,
            "providers": [
                {"name": "tidelog", "folder": "Tidelog", "type": "file", "options": {"path": str(DASHBOARDS)}}
            ],
        }
        (root / "dashboards" / "tidelog.yaml").write_text(yaml.safe_dump(provider, sort_keys=False))
        return root

    def start(self) -> None:
        binary = self.binary()
        if binary is None:
            raise FileNotFoundError("no Grafana server on this machine")
        homepath = next((path for path in HOMEPATHS if path.is_dir()), None)
        environment = {
            **os.environ,
            "GF_PATHS_PROVISIONING": str(self.provision()),
            "GF_PATHS_DATA": str(self.data_dir / "data"),
            "GF_PATHS_LOGS": str(self.data_dir / "logs"),
            "GF_SERVER_HTTP_ADDR": "127.0.0.1",
            "GF_SERVER_HTTP_PORT": str(self.port),
            "GF_AUTH_ANONYMOUS_ENABLED": "true",
        }
        arguments = [binary, "server"] if Path(binary).name == "grafana" else [binary]
        if homepath is not None:
            arguments.append(f"--homepath={homepath}")
        log = (self.data_dir / "grafana.log").open("ab")
        self.process = subprocess.Popen(arguments, env=environment, stdout=log, stderr=log)
        log.close()

    def stop(self) -> None:
        child_process.stop(self.process)
        self.process = None
