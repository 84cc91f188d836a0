"""The docs run as written: every `sh` and `python` block of README.md and docs/*.md, in order,
twice in a row (docs/spark.md once, and README's Spark block on the first pass only: both twice
with `-m soak`), against a real `tidelog dev up` (`dev up --secure` for docs/security.md), from a
folder laid out as the repository's root is for a reader (`.venv`, and `data` holding the running
cluster). Settings blocks are checked against the settings registry, resource blocks against the
CRDs. A block that cannot run here says why in the docs themselves (markdown_blocks.py).

Where Kafka's or REST Proxy's port was taken and `dev up` chose another, the blocks' 9092 (the Kafka
listener), 9292 (the brokers' gRPC port) and 8082 are replaced by the ports it chose; that is the
only change made to a block. `sh` blocks run under `set -euo pipefail` with `curl` failing on an
HTTP error (`--fail-with-body`), so an error answer fails the block as a failed command does.
"""

from __future__ import annotations

import json
import os
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
# Documents whose blocks start Spark jobs (a minute a pass here): the default run takes them once,
# the soak run twice (the suite's time is the developer's loop, issue 37).
ONCE_BY_DEFAULT: Final = frozenset({"spark.md"})


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


def _run(reader: Reader, path: Path, passes: int = PASSES, *, spark_again: bool = False) -> None:
    """Each runnable block in order, `passes` times; a block that starts Spark (10-20 s here) on
    the first pass only unless `spark_again` (the soak run's)."""
    not_here: list[str] = []
    for done in range(passes):
        for block in _runnable(path):
            if done and not spark_again and _starts_spark(block):
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


TWICE = [path for path in PLAIN_DOCUMENTS if path.name not in ONCE_BY_DEFAULT]
ONCE = [path for path in PLAIN_DOCUMENTS if path.name in ONCE_BY_DEFAULT]
WITH_SPARK = [path for path in PLAIN_DOCUMENTS if any(_starts_spark(block) for block in _runnable(path))]


class TestOnTheLocalCluster:
    @pytest.mark.parametrize("path", TWICE, ids=[p.name for p in TWICE])
    def test_document_runs_twice(self, plain_reader: Reader, path: Path) -> None:
        _run(plain_reader, path)

    @pytest.mark.parametrize("path", ONCE, ids=[p.name for p in ONCE])
    def test_document_runs_once(self, plain_reader: Reader, path: Path) -> None:
        _run(plain_reader, path, passes=1)

    @pytest.mark.soak
    @pytest.mark.parametrize("path", WITH_SPARK, ids=[p.name for p in WITH_SPARK])
    def test_document_with_spark_runs_twice_whole(self, plain_reader: Reader, path: Path) -> None:
        _run(plain_reader, path, spark_again=True)


class TestOnTheSecureLocalCluster:
    @pytest.mark.parametrize("path", SECURE_DOCUMENTS, ids=[p.name for p in SECURE_DOCUMENTS])
    def test_document_runs_twice(self, secure_reader: Reader, path: Path) -> None:
        _run(secure_reader, path)
