"""Output a person reads easily (aligned tables, progress on stderr) or a program reads (`-o json`).

Every listing command builds its result as plain data once and `emit`s it: JSON as is, text
through the command's own table. Consumed records print as text, one JSON object a line, or a
kcat-like pattern (`--format '%t %p %o %k %v %h'`).
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any, Final

__all__ = ["FORMATS", "check_record_format", "emit", "format_option", "progress", "record_line", "table"]

FORMATS: Final = ("text", "json")

# kcat's -f tokens: what each prints of a record (bytes).
_RECORD_TOKENS: Final[dict[str, Callable[[Any], bytes]]] = {
    "t": lambda r: r.topic.encode(),
    "p": lambda r: str(r.partition).encode(),
    "o": lambda r: str(r.offset).encode(),
    "T": lambda r: str(r.timestamp).encode(),
    "k": lambda r: r.key or b"",
    "v": lambda r: r.value or b"",
    "K": lambda r: str(-1 if r.key is None else len(r.key)).encode(),
    "S": lambda r: str(-1 if r.value is None else len(r.value)).encode(),
    "h": lambda r: b",".join(name.encode() + b"=" + (value or b"") for name, value in r.headers),
    "%": lambda r: b"%",
}
_ESCAPES: Final = {"n": b"\n", "t": b"\t", "r": b"\r", "\\": b"\\"}


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [[str(cell) for cell in row] for row in rows]
    widths = [max([len(str(header)), *(len(row[column]) for row in cells)]) for column, header in enumerate(headers)]
    lines = ["  ".join(header.upper().ljust(width) for header, width in zip(headers, widths, strict=True)).rstrip()]
    lines += ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in cells]
    return "\n".join(lines)


def format_option(parser: argparse.ArgumentParser, *, default: str | None = argparse.SUPPRESS) -> None:
    parser.add_argument(
        "-o",
        "--format",
        default=default,
        metavar="text|json",
        help="output as aligned text (default) or JSON",
    )


def emit(args: argparse.Namespace, data: object, text: Callable[[], str]) -> None:
    """Print `data` as JSON (`-o json`) or `text()` (the default)."""
    chosen = getattr(args, "format", None) or "text"
    if chosen == "json":
        print(json.dumps(data, indent=2, default=str))
    elif chosen == "text":
        print(text())
    else:
        raise SystemExit(f"error: --format {chosen!r}: give text or json")


def _text(data: bytes | None) -> tuple[str | None, bool]:
    """A key or value as JSON text: UTF-8 when it is, else base64 (the flag says which)."""
    if data is None:
        return None, False
    try:
        return data.decode(), False
    except UnicodeDecodeError:
        return base64.b64encode(data).decode(), True


def check_record_format(chosen: str) -> None:
    """Fail on a bad `consume --format` before the cluster is asked anything."""
    if chosen not in FORMATS:
        _pattern_parts(chosen)


def record_line(record: Any, chosen: str, print_key: bool) -> bytes:
    """One consumed record as `consume --format` prints it, newline included where the format has one."""
    if chosen == "text":
        return (((record.key or b"") + b"\t") if print_key else b"") + (record.value or b"") + b"\n"
    if chosen == "json":
        key, key_encoded = _text(record.key)
        value, value_encoded = _text(record.value)
        fields: dict[str, object] = {
            "topic": record.topic,
            "partition": record.partition,
            "offset": record.offset,
            "timestamp": record.timestamp,
            "key": key,
            "value": value,
            "headers": [{"name": name, "value": _text(data)[0]} for name, data in record.headers],
        }
        encoded = [name for name, flag in (("key", key_encoded), ("value", value_encoded)) if flag]
        if encoded:
            fields["base64"] = encoded  # these fields are base64: their bytes are not UTF-8
        return json.dumps(fields).encode() + b"\n"
    out = bytearray()
    for part in _pattern_parts(chosen):
        out += part(record) if callable(part) else part
    return bytes(out)  # as kcat: no newline unless the pattern has one ('%v\\n')


def _pattern_parts(pattern: str) -> list[bytes | Callable[[Any], bytes]]:
    """A kcat-like pattern as literal bytes and per-record token functions, checked whole."""
    if "%" not in pattern:
        raise SystemExit(f"error: --format {pattern!r}: give text, json or a pattern such as '%k %v\\n' (%t %p %o ...)")
    parts: list[bytes | Callable[[Any], bytes]] = []
    index = 0
    while index < len(pattern):
        char = pattern[index]
        if char in "%\\" and index + 1 < len(pattern):
            token = pattern[index + 1]
            known: dict[str, Any] = _RECORD_TOKENS if char == "%" else _ESCAPES
            if token not in known:
                raise SystemExit(f"error: --format: unknown {char}{token} (tokens: %t %p %o %T %k %v %K %S %h %%)")
            parts.append(known[token])
            index += 2
            continue
        parts.append(char.encode())
        index += 1
    return parts


def progress(message: str) -> None:
    """One line on stderr, rewritten in place when stderr is a terminal."""
    if sys.stderr.isatty():
        print(f"\r{message}", end="", file=sys.stderr, flush=True)
