"""Prints the fault suite's summary table after a run that included fault scenarios."""

from __future__ import annotations

from typing import Any

from tests.faults.summary import ROWS, table


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if ROWS:
        terminalreporter.section("fault suite summary (issue 19)")
        for line in table():
            terminalreporter.write_line(line)
