"""Output a person reads easily: aligned tables, progress on stderr."""

from __future__ import annotations

import sys
from collections.abc import Sequence

__all__ = ["progress", "table"]


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [[str(cell) for cell in row] for row in rows]
    widths = [max([len(str(header)), *(len(row[column]) for row in cells)]) for column, header in enumerate(headers)]
    lines = ["  ".join(header.upper().ljust(width) for header, width in zip(headers, widths, strict=True)).rstrip()]
    lines += ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in cells]
    return "\n".join(lines)


def progress(message: str) -> None:
    """One line on stderr, rewritten in place when stderr is a terminal."""
    if sys.stderr.isatty():
        print(f"\r{message}", end="", file=sys.stderr, flush=True)
