"""The fenced code blocks of a Markdown file, with what the docs tests do with each.

Every fence names its language. `sh` and `python` blocks are commands: the docs tests run them,
unless the line before the fence says why not (`<!-- docs-test: skip: REASON -->`). `properties`
and `yaml` blocks are settings and resources: checked against the settings registry and the CRDs.
`text` is a picture (a file layout, a format), not run. A fence without a language is an error, so
no command hides in an unmarked block.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Final

__all__ = ["Block", "blocks_of"]

RUN: Final = frozenset({"sh", "python"})
CHECKED: Final = frozenset({"properties", "yaml"})
SHOWN: Final = frozenset({"text"})
_FENCE: Final = re.compile(r"^```(\S*)\s*$")
_DIRECTIVE: Final = re.compile(r"^<!-- docs-test: skip: (.+?) -->$")


@dataclasses.dataclass(frozen=True)
class Block:
    path: Path
    line: int  # of the opening fence, 1-based
    language: str
    text: str
    skip_reason: str | None

    @property
    def where(self) -> str:
        return f"{self.path.name}:{self.line}"


def blocks_of(path: Path) -> list[Block]:
    lines = path.read_text().splitlines()
    found: list[Block] = []
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        language = opening.group(1)
        closing = next((i for i in range(index + 1, len(lines)) if lines[i].startswith("```")), None)
        if closing is None:
            raise ValueError(f"{path.name}:{index + 1}: a fence that is never closed")
        if language not in RUN | CHECKED | SHOWN:
            raise ValueError(
                f"{path.name}:{index + 1}: a fence must name its language, one of {sorted(RUN | CHECKED | SHOWN)}"
            )
        directive = _DIRECTIVE.match(lines[index - 1]) if index > 0 else None
        found.append(
            Block(
                path,
                index + 1,
                language,
                "\n".join(lines[index + 1 : closing]) + "\n",
                directive.group(1) if directive else None,
            )
        )
        index = closing + 1
    return found
