"""The repository keeps its designed shape: folders, import names, generated files, layers."""

from __future__ import annotations

import ast
import filecmp
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tidelog.v1 import broker_pb2, broker_pb2_grpc

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "path",
    [
        "services/broker",
        "services/controller",
        "services/coordinator",
        "services/gateway",
        "operator",
        "helm",
        "spark_jobs",
        "proto/tidelog/v1",
        "tests",
        "skaffold.yaml",
        "README.md",
        "pyproject.toml",
        "docs/adr",
        "bench",
        ".ci/run",
    ],
)
def test_top_level_is_as_designed(path: str) -> None:
    assert (ROOT / path).exists()


@pytest.mark.parametrize(
    ("package", "folder"),
    [("tidelog.broker", "services/broker"), ("tidelog.broker.storage", "services/broker/storage")],
)
def test_service_folders_are_tidelog_packages(package: str, folder: str) -> None:
    module = __import__(package, fromlist=["_"])
    assert module.__file__ is not None
    assert Path(module.__file__).resolve().parent == (ROOT / folder).resolve()


def test_import_operator_is_still_the_standard_library() -> None:
    # -S: no site, so nothing has imported `operator` before the repo root (sys.path[0]) is searched.
    result = subprocess.run(
        [sys.executable, "-S", "-c", "import operator; print(operator.__file__, operator.itemgetter)"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert str(ROOT) not in result.stdout
    assert "itemgetter" in result.stdout


def test_generated_grpc_stubs_are_fresh(tmp_path: Path) -> None:
    subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_proto.py"), str(tmp_path)], check=True)
    generated = tmp_path / "tidelog" / "v1"
    committed = ROOT / "src" / "tidelog" / "v1"
    names = sorted(path.name for path in generated.iterdir() if path.is_file())
    assert names == sorted(path.name for path in committed.iterdir() if path.is_file())
    _, mismatch, errors = filecmp.cmpfiles(generated, committed, names, shallow=False)
    assert not mismatch and not errors, f"stale stubs {mismatch}: run python scripts/gen_proto.py"


def test_stubs_import_and_build_messages() -> None:
    request = broker_pb2.ProduceRequest(acks=-1, partitions=[broker_pb2.ProducePartition(topic="t")])
    assert broker_pb2.ProduceRequest.FromString(request.SerializeToString()) == request
    assert hasattr(broker_pb2_grpc, "BrokerStub")


def test_the_cli_reaches_into_the_broker_only_through_its_storage_package() -> None:
    # `tidelog log` works on log folders offline (Kafka's kafka-dump-log.sh): the storage engine's
    # public package, never the broker's services (import contract in pyproject.toml for the rest).
    cli = Path(__file__).resolve().parents[2] / "src" / "tidelog" / "cli"
    reached = set()
    for path in cli.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("tidelog.broker"):
                reached.add(node.module)
            elif isinstance(node, ast.Import):
                reached.update(alias.name for alias in node.names if alias.name.startswith("tidelog.broker"))
    assert reached == {"tidelog.broker.storage"}


def test_the_operator_reaches_the_cluster_only_through_the_client() -> None:
    # operator/ is a namespace portion (no __init__.py, see ADR 0001), which import-linter cannot
    # see; this test is its contract: the operator is a client of the cluster, like the CLI (a
    # process in the cluster too, so it shares the services' runtime: logs, metrics).
    allowed = ("tidelog.client", "tidelog.common", "tidelog.server_common", "tidelog.operator", "tidelog.v1")
    for path in sorted((ROOT / "operator").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else [alias.name for alias in node.names]
                if isinstance(node, ast.Import)
                else []
            )
            for name in names:
                if name.startswith("tidelog"):
                    assert name.startswith(allowed), f"{path.name} imports {name}"


# Tables: modules whose length is their content's, one entry per setting or metric (ADR 0022).
TABLES = {"src/tidelog/common/config.py", "src/tidelog/server_common/metrics_catalog.py"}
MODULE_LINES_MAX = 500


def test_no_hand_written_module_is_over_500_lines_but_the_tables() -> None:
    """Small modules with one job each: a module past 500 lines holds more than one (ADR 0022)."""
    long = {}
    for folder in ("src/tidelog", "services", "operator", "spark_jobs"):
        # os.walk does not enter src/tidelog's symlinks to services/: each module is seen once
        for directory, _, names in os.walk(ROOT / folder):
            for name in names:
                relative = str((Path(directory) / name).relative_to(ROOT))
                if not name.endswith(".py") or relative.startswith("src/tidelog/v1/"):  # v1: generated
                    continue
                lines = len((ROOT / relative).read_text().splitlines())
                if lines > MODULE_LINES_MAX and relative not in TABLES:
                    long[relative] = lines
    assert long == {}
    for table in TABLES:
        assert (ROOT / table).exists(), f"{table}: named as a table but gone"
