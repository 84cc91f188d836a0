"""The group chaos run (tests/faults/group_chaos.py) under range, cooperative-sticky and static
membership. The default run takes one seeded round of faults under cooperative-sticky and static
membership (the eager protocol's rebalances are also those of tests/cluster/test_groups.py's
churn under range); `-m soak` takes every mode, with more rounds
and seeds (TIDELOG_GROUP_CHAOS_ROUNDS, TIDELOG_GROUP_CHAOS_SEEDS); TIDELOG_GROUP_CHAOS_SEED=<seed>
replays one schedule (a real cluster's timing still varies)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.cluster.conftest import COORDINATOR_ARGS, started_cluster
from tests.faults import summary
from tests.faults.group_chaos import GroupChaos, Report

MODES = ["range", "cooperative-sticky", "static"]
SHORT_MODES = ["cooperative-sticky", "static"]  # the suite's time is the developer's loop (issue 37)


def _seeds(default: list[int]) -> list[int]:
    if "TIDELOG_GROUP_CHAOS_SEED" in os.environ:
        return [int(os.environ["TIDELOG_GROUP_CHAOS_SEED"])]
    return default


async def _run(tmp_path: Path, mode: str, seed: int, rounds: int) -> Report:
    async with started_cluster(tmp_path / "cluster", coordinators=2, coordinator_args=COORDINATOR_ARGS) as cluster:
        report = await GroupChaos(cluster, tmp_path, mode, seed, rounds).run()
    print("\n" + "\n".join(report.lines()))
    kept_p90, _, normal_gap, normal_p99, _ = report.gap_figures()
    summary.record(
        f"group chaos {mode} seed {seed} ({len(report.faults)} faults)",
        acknowledged=report.acknowledged,
        lost=len(report.lost),
        duplicated=sum(report.duplicates.values()),
        reordered=len(report.backwards),
        longest_unavailability_s=max((fault.recovered_s for fault in report.faults), default=0.0),
    )
    replay = f"replay with TIDELOG_GROUP_CHAOS_SEED={seed}"
    assert not report.lost, (report.lost[:10], replay)
    assert report.bad_duplicates == 0, ("\n".join(report.lines()), replay)
    assert not report.backwards, (report.backwards[:10], replay)
    assert not any(report.final_lag.values()), (report.final_lag, replay)
    assert not report.overlaps, (report.overlaps[:10], replay)
    assert not report.zombie_commits_accepted, (report.zombie_commits_accepted, replay)
    assert all(fault.static_kept in (None, True) for fault in report.faults), ("\n".join(report.lines()), replay)
    session_s = 6.0 if mode == "static" else 4.0
    for fault in report.faults:
        assert fault.recovered_s < session_s + 15, (fault, replay)  # a session, a rebalance, a restart
    if mode != "range":
        assert report.kept_gaps, "cooperative rebalances with partitions kept were seen"
        # KIP-429: a rebalance stops no partition a member keeps. Through a rebalance, a kept
        # partition's readable records wait no longer than twice the normal gap between polls
        # returning its records (or the p99 wait outside rebalances, when the machine itself
        # stalls longer). Waits count from when the records were acknowledged: a pause of the
        # producer is no gap of the consumer's. Judged at the p90 of hundreds of gaps: a member
        # whose polls stopped while it rejoined would wait its whole rejoin on every kept
        # partition, while one stall of a loaded 2-core machine (0.32 s once in CI) is no
        # protocol's doing.
        assert kept_p90 <= max(2 * normal_gap, normal_p99), ("\n".join(report.lines()), replay)
    return report


@pytest.mark.timeout(420)
@pytest.mark.parametrize("mode", SHORT_MODES)
async def test_group_chaos_short(tmp_path: Path, mode: str) -> None:
    for seed in _seeds([3901]):
        await _run(tmp_path / str(seed), mode, seed, rounds=1)


@pytest.mark.soak
@pytest.mark.timeout(0)
@pytest.mark.parametrize("mode", MODES)
async def test_group_chaos_soak(tmp_path: Path, mode: str) -> None:
    seeds = int(os.environ.get("TIDELOG_GROUP_CHAOS_SEEDS", "3"))
    for seed in _seeds([3910 + n for n in range(seeds)]):
        await _run(tmp_path / str(seed), mode, seed, rounds=int(os.environ.get("TIDELOG_GROUP_CHAOS_ROUNDS", "4")))
