"""Services forked from a helper that imported them once (ADR 0034): each is a process of its own,
started as `python -m` would start it, whose signals and exit status read as subprocess.Popen's."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tidelog.dev import fork_server
from tidelog.dev.fork_server import ForkServer
from tidelog.dev.local_cluster import LocalCluster

PROBE = "tests.dev.forked_probe"


@pytest.fixture
def server() -> Iterator[ForkServer]:
    started = ForkServer()
    yield started
    started.close()


def wait_for_file(path: Path, timeout_s: float = 30) -> dict[str, object]:
    deadline = time.monotonic() + timeout_s
    while not (path.exists() and path.read_text()):
        assert time.monotonic() < deadline, f"{path} never written"
        time.sleep(0.01)
    loaded: dict[str, object] = json.loads(path.read_text())
    return loaded


def test_a_forked_service_has_its_arguments_environment_folder_session_streams_and_exit_code(
    server: ForkServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # the client's working folder is the service's
    log = tmp_path / "probe.log"
    log.write_text("an earlier life\n")
    process = server.spawn(PROBE, [str(tmp_path / "report"), "3"], {"FORKED_PROBE": "yes"}, log)
    assert process.wait(timeout=30) == 3 and process.returncode == 3
    report = wait_for_file(tmp_path / "report")
    assert report["argv"] == [str(tmp_path / "report"), "3"]
    assert report["variable"] == "yes" and report["cwd"] == str(tmp_path)
    assert report["session"] == report["pid"] == process.pid  # a session of its own (start_new_session)
    assert report["threads"] == 1
    assert log.read_text().splitlines() == ["an earlier life", "to stdout", "to stderr"]  # appended, unbuffered


def test_signals_and_exit_status_read_as_popen_does(server: ForkServer, tmp_path: Path) -> None:
    first = server.spawn(PROBE, [str(tmp_path / "first"), "wait"], dict(os.environ), tmp_path / "first.log")
    second = server.spawn(PROBE, [str(tmp_path / "second"), "wait"], dict(os.environ), tmp_path / "second.log")
    wait_for_file(tmp_path / "first")
    wait_for_file(tmp_path / "second")
    assert first.pid != second.pid
    assert first.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        first.wait(timeout=0.2)
    first.terminate()
    assert first.wait(timeout=30) == -signal.SIGTERM
    assert second.poll() is None  # one's end is not another's
    second.kill()
    assert second.wait(timeout=30) == -signal.SIGKILL
    second.kill()  # an ended process: nothing is sent (its pid may be another's by now)


def test_an_error_in_the_service_is_its_traceback_and_exit_status_1(server: ForkServer, tmp_path: Path) -> None:
    process = server.spawn(PROBE, [], dict(os.environ), tmp_path / "failed.log")  # main unpacks too few
    assert process.wait(timeout=30) == 1
    assert "ValueError: not enough values to unpack" in (tmp_path / "failed.log").read_text()
    missing = server.spawn("tidelog.no_such_service", [], dict(os.environ), tmp_path / "missing.log")
    assert missing.wait(timeout=30) == 1
    assert "No module named 'tidelog.no_such_service'" in (tmp_path / "missing.log").read_text()


def test_a_lost_helper_leaves_its_services_running_and_their_ends_still_seen(
    server: ForkServer, tmp_path: Path
) -> None:
    process = server.spawn(PROBE, [str(tmp_path / "report"), "wait"], dict(os.environ), tmp_path / "probe.log")
    wait_for_file(tmp_path / "report")
    server._helper.kill()  # the helper dies: no one reports exits any more
    server._helper.wait()
    deadline = time.monotonic() + 30
    while not server.lost:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert process.poll() is None  # still running
    with pytest.raises(RuntimeError, match="gone"):
        server.spawn(PROBE, [], dict(os.environ), tmp_path / "never.log")
    process.kill()
    assert process.wait(timeout=30) == -signal.SIGKILL  # seen gone by its pid


def test_shared_is_one_server_a_process_until_it_is_lost(monkeypatch: pytest.MonkeyPatch) -> None:
    # A registry of this test's own: the worker's shared helper forked the clusters other tests use.
    monkeypatch.setattr(fork_server, "_shared", {})
    first = fork_server.shared()
    assert fork_server.shared() is first
    first._helper.kill()
    first._helper.wait()
    deadline = time.monotonic() + 30
    while not first.lost:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    second = fork_server.shared()
    assert second is not first and not second.lost
    second.close()


def test_a_local_cluster_forks_its_services_but_execs_one_with_variables_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(fork_server.ENABLED_BY, "1")
    cluster = LocalCluster(tmp_path / "cluster", environments={"broker-2": {"FORKED_PROBE": "own"}})
    cluster._spawn("broker-1", PROBE, [str(tmp_path / "one"), "0"])
    cluster._spawn("broker-2", PROBE, [str(tmp_path / "two"), "0"])  # (LD_PRELOAD needs an exec)
    assert isinstance(cluster.processes["broker-1"], fork_server.ForkedProcess)
    assert isinstance(cluster.processes["broker-2"], subprocess.Popen)
    assert [process.wait(timeout=30) for process in cluster.processes.values()] == [0, 0]
    assert wait_for_file(tmp_path / "one")["variable"] is None
    assert wait_for_file(tmp_path / "two")["variable"] == "own"
    assert (tmp_path / "cluster" / "logs" / "broker-1.log").read_text() == "to stdout\nto stderr\n"


def test_a_service_that_ends_at_once_has_its_exit_seen(server: ForkServer, tmp_path: Path) -> None:
    # Its exit is reported right after its pid: the process must be known by then (it once was
    # registered only when spawn() woke, and an exit read first was dropped: wait() hung).
    for attempt in range(40):
        process = server.spawn(PROBE, [], dict(os.environ), tmp_path / f"{attempt}.log")
        assert process.wait(timeout=10) == 1
