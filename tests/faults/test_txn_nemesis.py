"""The transactional nemesis (tests/faults/txn_nemesis.py): transactional producers and a
consume–transform–produce member under overlapping process faults, coordinators included, checked
as Jepsen checks Kafka's transactions.

The default run takes one seed with a short fault window; `-m soak` runs more seeds, longer
(TIDELOG_TXN_NEMESIS_RUNS, TIDELOG_TXN_NEMESIS_SECONDS). TIDELOG_TXN_NEMESIS_SEED=<seed> replays one.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from tests.faults import summary
from tests.faults.txn_nemesis import run_txn_nemesis

SHORT_SEEDS = [3401]
SHORT_SECONDS = 14.0


def _seeds(default: list[int]) -> list[int]:
    if "TIDELOG_TXN_NEMESIS_SEED" in os.environ:
        return [int(os.environ["TIDELOG_TXN_NEMESIS_SEED"])]
    return default


async def _run_and_check(tmp_path: Path, seed: int, seconds: float) -> None:
    report = await run_txn_nemesis(tmp_path / f"cluster-{seed}", seed, seconds)
    print("\n" + report.details())
    summary.record(
        f"transactional nemesis seed {seed} ({seconds:.0f} s; aborted read {len(report.aborted_read)}, "
        f"partial {len(report.partial)})",
        acknowledged=report.committed,
        lost=len(report.lost) + len(report.ctp_missing),
        duplicated=len(report.duplicated) + len(report.ctp_duplicated),
        reordered=len(report.reordered),
        longest_unavailability_s=0.0,
        unit="txn",
    )
    assert report.ok, f"{report.details()}\nreplay with TIDELOG_TXN_NEMESIS_SEED={seed}"


@pytest.mark.parametrize("seed", _seeds(SHORT_SEEDS))
async def test_transactional_nemesis_short(tmp_path: Path, seed: int) -> None:
    await _run_and_check(tmp_path, seed, SHORT_SECONDS)


_SOAK_RUNS = int(os.environ.get("TIDELOG_TXN_NEMESIS_RUNS", "6"))


@pytest.mark.soak
@pytest.mark.timeout(0)
@pytest.mark.parametrize("seed", _seeds([random.Random(11).randrange(1 << 30) + run for run in range(_SOAK_RUNS)]))
async def test_transactional_nemesis_soak(tmp_path: Path, seed: int) -> None:
    await _run_and_check(tmp_path, seed, float(os.environ.get("TIDELOG_TXN_NEMESIS_SECONDS", "50")))
