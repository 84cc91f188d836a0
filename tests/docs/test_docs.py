"""The docs run as written: every `sh` and `python` block of README.md and docs/*.md, in order,
twice in a row, against a real `tidelog dev up` (`dev up --secure` for docs/security.md), from a
folder laid out as the repository's root is for a reader (`.venv`, and `data` holding the running
cluster). Settings blocks are checked against the settings registry, resource blocks against the
CRDs. A block that cannot run here says why in the docs themselves (markdown_blocks.py).

A block that starts Spark costs 25-30 s a run here (a JVM, a session, its first query): the default
run checks them without running them (the Python compiles and its modules exist; the shell parses,
and each Spark job's arguments parse with the job's own parser); tests/spark runs the same reads,
writes and jobs in one warm session. `-m soak` runs every Spark block on both passes (issue 37: the
suite's time is the developer's loop).

Where Kafka's or REST Proxy's port was taken and `dev up` chose another, the blocks' 9092 (the Kafka
listener), 9292 (the brokers' gRPC port) and 8082 are replaced by the ports it chose; that is the
only change made to a block. `sh` blocks run under `set -euo pipefail` with `curl` failing on an
HTTP error (`--fail-with-body`), so an error answer fails the block as a failed command does.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest
import yaml

from tests.dev_up import running_dev_up
from tests.docs.markdown_blocks import RUN, Block, blocks_of
from tidelog.common.config import parse_configs
from tidelog.common.settings import read_properties
from tidelog.dev.kube_admission import Admission
from tidelog.operator.crds import FINALIZED_CRDS

pytestmark = pytest.mark.timeout(1800)

REPOSITORY: Final = Path(__file__).resolve().parents[2]
DOCUMENTS: Final = [REPOSITORY / "README.md", *sorted((REPOSITORY / "docs").glob("*.md"))]
SECURE: Final = frozenset({"security.md"})  # run against `dev up --secure`
BLOCK_TIMEOUT_S: Final = 600
CURL_FAILS: Final = 'curl() { command curl --silent --show-error --fail-with-body "$@"; }\n'
PASSES: Final = 2  # a second run finds what the first left: the examples must be rerunnable


def _runnable(path: Path) -> list[Block]:
    return [block for block in blocks_of(path) if block.language in RUN and block.skip_reason is None]


PLAIN_DOCUMENTS: Final = [p for p in DOCUMENTS if p.name not in SECURE and _runnable(p)]
SECURE_DOCUMENTS: Final = [p for p in DOCUMENTS if p.name in SECURE and _runnable(p)]


def test_every_fence_names_its_language() -> None:
    for path in [*DOCUMENTS, *sorted((REPOSITORY / "docs" / "adr").glob("*.md"))]:
        blocks_of(path)  # raises, naming the line


def test_the_blocks_that_do_not_run_say_why() -> None:
    skipped = [block for path in DOCUMENTS for block in blocks_of(path) if block.skip_reason is not None]
    assert all(block.language in RUN for block in skipped), "only commands can be skipped"
    # The two commands, the benchmarks, `dev up --secure` (started by this test) and Kubernetes.
    assert len(skipped) == 4, [block.where for block in skipped]


def test_settings_blocks_are_settings_the_services_take() -> None:
    checked = 0
    for path in DOCUMENTS:
        for block in blocks_of(path):
            if block.language != "properties":
                continue
            values = read_properties(_written(block))
            parse_configs(values)  # an unknown name or a bad value raises InvalidConfigError
            assert not any("#" in value for value in values.values()), f"{block.where}: a comment inside a value"
            checked += 1
    assert checked >= 1


def test_resource_blocks_are_admitted_by_the_crds() -> None:
    admissions = {
        crd["spec"]["names"]["kind"]: Admission(
            crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"], status_subresource=True
        )
        for crd in FINALIZED_CRDS
    }
    checked = 0
    for path in DOCUMENTS:
        for block in blocks_of(path):
            if block.language != "yaml":
                continue
            for resource in yaml.safe_load_all(block.text):
                assert resource["kind"] in admissions, f"{block.where}: {resource['kind']} is none of our kinds"
                admissions[resource["kind"]].admit(resource, None, None)  # RefusedError names the field
                checked += 1
    assert checked >= 1


def _written(block: Block) -> Path:
    folder = Path(os.environ.get("TMPDIR", "/tmp")) / "tidelog-docs-blocks"
    folder.mkdir(exist_ok=True)
    path = folder / f"{block.path.stem}-{block.line}.{block.language}"
    path.write_text(block.text)
    return path


class Reader:
    """A folder laid out as the repository is for a reader, with the cluster under ./data."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        (folder / ".venv").symlink_to(REPOSITORY / ".venv")
        self.environment = {
            **os.environ,
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
            "XDG_STATE_HOME": str(folder / "state"),  # this cluster is announced to these commands only
            "PYSPARK_PYTHON": sys.executable,
        }

    def ports(self) -> dict[str, str]:
        """The endpoints the docs name → where this cluster listens, where they differ."""
        saved = json.loads((self.folder / "data" / "cluster.json").read_text())
        broker, gateway = f"127.0.0.1:{saved['brokers']['1']}", f"127.0.0.1:{saved['gateways']['1']}"
        kafka = f"127.0.0.1:{saved['kafka']['1']}"
        replaced = {"127.0.0.1:9292": broker, "localhost:9292": broker}
        replaced |= {"127.0.0.1:9092": kafka, "localhost:9092": kafka}
        replaced |= {"127.0.0.1:8082": gateway, "localhost:8082": gateway}
        return {written: actual for written, actual in replaced.items() if written != actual}

    def run(self, block: Block) -> str | None:
        """Runs the block; None, or why it could not run here."""
        text = block.text
        for written, actual in self.ports().items():
            text = text.replace(written, actual)
        if _starts_spark(block) and shutil.which("java") is None:
            return f"{block.where}: no Java runtime for Spark"
        if "kcat " in text and shutil.which("kcat") is None:
            return f"{block.where}: kcat is not installed (Debian package kcat)"
        if block.language == "sh":
            command = ["bash", "-euo", "pipefail", "-c", CURL_FAILS + text]
        else:
            command = [sys.executable, "-c", text]
        done = subprocess.run(
            command,
            cwd=self.folder,
            env=self.environment,
            capture_output=True,
            text=True,
            timeout=BLOCK_TIMEOUT_S,
            check=False,
        )
        assert done.returncode == 0, (
            f"{block.where} ({block.language}) exited {done.returncode}\n--- stdout\n{done.stdout[-3000:]}"
            f"\n--- stderr\n{done.stderr[-3000:]}"
        )
        return None


def _starts_spark(block: Block) -> bool:
    return "pyspark" in block.text or "spark_jobs" in block.text


def _check_without_spark(block: Block) -> None:
    """A Spark block checked, not run: Python that compiles and whose modules exist; shell that
    parses, whose `python -m tidelog.spark_jobs.JOB ARGS` lines each parse with JOB's parser."""
    if block.language == "python":
        for node in ast.walk(ast.parse(block.text, block.where)):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                modules = [node.module]
            else:
                continue
            for module in modules:
                assert importlib.util.find_spec(module) is not None, f"{block.where}: no module {module}"
        return
    parsed = subprocess.run(["bash", "-n", "-c", block.text], capture_output=True, text=True, check=False)
    assert parsed.returncode == 0, f"{block.where}: {parsed.stderr}"
    jobs = 0
    for line in block.text.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        if words[:2] == ["python", "-m"] and words[2].startswith("tidelog.spark_jobs."):
            try:
                importlib.import_module(words[2]).parse_args(words[3:])
            except SystemExit as refused:  # argparse's answer to an unknown or missing option
                pytest.fail(f"{block.where}: {' '.join(words)}: the job refuses its arguments ({refused})")
            jobs += 1
    assert jobs or "pyspark" in block.text, f"{block.where}: a Spark block that names no job"


def _run(reader: Reader, path: Path, passes: int = PASSES, *, run_spark: bool = False) -> None:
    """Each runnable block in order, `passes` times; a block that starts Spark runs only with
    `run_spark` (the soak run's), else it is checked on the first pass."""
    not_here: list[str] = []
    for done in range(passes):
        for block in _runnable(path):
            if _starts_spark(block) and not run_spark:
                if not done:
                    _check_without_spark(block)
                continue
            reason = reader.run(block)
            if reason is not None:
                not_here.append(reason)
    if not_here:
        pytest.skip("; ".join(sorted(set(not_here))))


# Class-scoped: the plain cluster stops before the secure one starts (one at a time, as a reader runs them).
@pytest.fixture(scope="class")
def plain_reader(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Reader]:
    reader = Reader(tmp_path_factory.mktemp("reader"))
    with running_dev_up(reader.folder / "data", environment={"XDG_STATE_HOME": str(reader.folder / "state")}):
        yield reader


@pytest.fixture(scope="class")
def secure_reader(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Reader]:
    reader = Reader(tmp_path_factory.mktemp("secure-reader"))
    environment = {"XDG_STATE_HOME": str(reader.folder / "state")}
    with running_dev_up(reader.folder / "data", "--secure", environment=environment) as output:
        assert "ACLs enforced" in output, output
        yield reader


WITH_SPARK = [path for path in PLAIN_DOCUMENTS if any(_starts_spark(block) for block in _runnable(path))]


class TestOnTheLocalCluster:
    @pytest.mark.parametrize("path", PLAIN_DOCUMENTS, ids=[p.name for p in PLAIN_DOCUMENTS])
    def test_document_runs_twice(self, plain_reader: Reader, path: Path) -> None:
        _run(plain_reader, path)

    @pytest.mark.soak
    @pytest.mark.parametrize("path", WITH_SPARK, ids=[p.name for p in WITH_SPARK])
    def test_document_with_spark_runs_twice_whole(self, plain_reader: Reader, path: Path) -> None:
        _run(plain_reader, path, run_spark=True)


class TestOnTheSecureLocalCluster:
    @pytest.mark.parametrize("path", SECURE_DOCUMENTS, ids=[p.name for p in SECURE_DOCUMENTS])
    def test_document_runs_twice(self, secure_reader: Reader, path: Path) -> None:
        _run(secure_reader, path)
