"""What every fuzzing test does with its atheris target (a `fuzz_*.py` beside it with a
`fuzz_one(data)` and a `fuzz_corpus/` folder): replay the committed corpus in this process, and run
the fuzzer for a bounded number of inputs on a copy of it."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path


def load_target(target: Path) -> Callable[[bytes], None]:
    """The target's `fuzz_one`, loaded as the fuzzer loads it (its imports instrumented)."""
    spec = importlib.util.spec_from_file_location(target.stem, target)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fuzz_one: Callable[[bytes], None] = module.fuzz_one
    return fuzz_one


def replay_corpus(target: Path, corpus: Path, *, at_least: int) -> None:
    """Every committed input through `fuzz_one`: it raises whatever the target does not allow."""
    fuzz_one = load_target(target)
    inputs = sorted(corpus.iterdir())
    assert len(inputs) >= at_least, f"{corpus}: {len(inputs)} inputs"
    for path in inputs:
        fuzz_one(path.read_bytes())


def bounded_run(target: Path, corpus: Path, tmp_path: Path, *, runs: int, env: Mapping[str, str] | None = None) -> None:
    """`runs` inputs of libFuzzer on a copy of `corpus` (what it adds stays out of the repository);
    fails with the crashing inputs' names and the fuzzer's last words."""
    copy = tmp_path / "corpus"
    shutil.copytree(corpus, copy)
    run = subprocess.run(
        [
            sys.executable,
            str(target),
            f"-runs={runs}",
            "-max_total_time=60",
            f"-artifact_prefix={tmp_path}/",
            str(copy),
        ],
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    crashes = sorted(path.name for path in tmp_path.glob("crash-*"))
    assert run.returncode == 0 and not crashes, (crashes, run.stderr[-3000:])
