"""The fault suite's summary (issue 19): every scenario records what it proved — records
acknowledged, lost, duplicated, reordered, and the longest time without an acknowledgement — and
the suite prints them as one table at the end (tests/faults/conftest.py)."""

from __future__ import annotations

import dataclasses

__all__ = ["ROWS", "Row", "record"]


@dataclasses.dataclass(frozen=True, slots=True)
class Row:
    scenario: str
    acknowledged: int
    lost: int
    duplicated: int
    reordered: int
    longest_unavailability_s: float
    unit: str = "rec"


ROWS: list[Row] = []


def record(
    scenario: str,
    *,
    acknowledged: int,
    lost: int,
    duplicated: int,
    reordered: int = 0,
    longest_unavailability_s: float,
    unit: str = "rec",
) -> None:
    """One scenario's figures (`unit`: rec for records, offs for committed offsets)."""
    ROWS.append(Row(scenario, acknowledged, lost, duplicated, reordered, longest_unavailability_s, unit))


def table() -> list[str]:
    header = f"{'scenario':58s} {'acknowledged':>13s} {'lost':>5s} {'dup':>5s} {'reord':>5s} {'longest gap':>12s}"
    lines = [header, "-" * len(header)]
    for row in ROWS:
        lines.append(
            f"{row.scenario[:58]:58s} {row.acknowledged:>8,d} {row.unit:<4s} {row.lost:>5d} {row.duplicated:>5d} "
            f"{row.reordered:>5d} {row.longest_unavailability_s:>10.2f} s"
        )
    return lines
