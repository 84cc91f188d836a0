"""The `tidelog` command, run as a person would: a real process on real files."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def tidelog(*args: str, stdin: str = "") -> str:
    result = subprocess.run(
        [sys.executable, "-m", "tidelog.cli.main", *args],
        input=stdin,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return result.stdout


def test_dev_up_writes_recovers_and_appends_on_the_same_data(tmp_path: Path) -> None:
    first = tidelog("dev", "up", "--data-dir", str(tmp_path))
    assert "appended and read back 100000 records; log end offset 100000" in first
    second = tidelog("dev", "up", "--data-dir", str(tmp_path))
    assert "offsets 0..100000" in second
    assert "log end offset 200000" in second


def test_log_produce_consume_and_dump(tmp_path: Path) -> None:
    folder = str(tmp_path / "orders-3")
    assert "offsets 0..2" in tidelog("log", "produce", folder, stdin="one\ntwo\nthree\n")
    assert tidelog("log", "consume", folder, "--offset", "1") == "two\nthree\n"
    dump = tidelog("log", "dump", folder, "--records")
    assert "log orders-3: start 0, end 3" in dump
    assert "batch base 0 last 2 records 3" in dump
    assert "value b'three'" in dump
