"""Service processes forked from one that has already imported them (ADR 0034).

A Tidelog service spends 0.35-0.8 s of CPU importing its modules (gRPC, protobuf, numpy, FastAPI)
before it does anything, and the default test run starts about 490 of them: a quarter of the
suite's CPU on a 2-core machine. With `TIDELOG_DEV_FORK_SERVER=1` in its environment, a
`LocalCluster` starts its services the way Python's `forkserver` start method does: one helper
process per client process imports the four services' `main` modules once, and each service is
`os.fork()`ed from it, then runs `main(arguments)` with its own session, environment, working
folder, standard streams (unbuffered, as `PYTHONUNBUFFERED` makes them) and arguments. Each is a
real process, with its own pid, signals and exit status, running the same `main` as
`python -m tidelog.<service>.main` would.

The helper forks before it has any thread or channel: importing gRPC starts nothing; numpy's
OpenBLAS would start threads, so the helper runs with `OPENBLAS_NUM_THREADS=1`. A forked service
is not a child of the client: the helper waits for it and reports its exit status, which
`ForkedProcess` gives as `subprocess.Popen` does (negative: the signal that ended it).

What a forked service does not get fresh (named in ADR 0034): the interpreter's string-hash seed
and anything read from the environment while importing, both the helper's.

Protocol, one JSON object a line over a Unix socket pair: the client sends
`{"spawn": n, "module", "arguments", "env", "cwd", "log"}`; the helper answers
`{"spawned": n, "pid"}` (or `"error"`) at once and `{"exited": pid, "returncode"}` when it ends.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import importlib
import io
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Final

__all__ = ["ENABLED_BY", "PRELOADED", "ForkServer", "ForkedProcess", "enabled", "shared"]

ENABLED_BY: Final = "TIDELOG_DEV_FORK_SERVER"  # "1": LocalCluster forks its services from the helper
PRELOADED: Final = (
    "tidelog.broker.main",
    "tidelog.controller.main",
    "tidelog.coordinator.main",
    "tidelog.gateway.main",
)
SPAWN_TIMEOUT_S: Final = 30.0  # the helper answers a spawn at once; this long means it is stuck
HELPER_READY_TIMEOUT_S: Final = 60.0  # its imports, on a loaded machine
_EXIT_POLL_S: Final = 0.05  # how often a process is looked for once the helper itself is gone


def enabled() -> bool:
    return os.environ.get(ENABLED_BY, "") == "1"


class ForkedProcess:
    """A service forked by the helper, with the part of `subprocess.Popen`'s interface that
    LocalCluster and its users call: pid, returncode, poll, wait, send_signal, terminate, kill."""

    def __init__(self, server: ForkServer, pid: int, args: list[str]) -> None:
        self._server = server
        self.pid = pid
        self.args = args
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and self._server.lost:
            self._look_for_it()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._server.changed:
            while self.returncode is None:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
                if self._server.lost:
                    self._look_for_it()
                    self._server.changed.wait(_EXIT_POLL_S if left is None else min(left, _EXIT_POLL_S))
                else:
                    self._server.changed.wait(left)
            return self.returncode

    def _look_for_it(self) -> None:
        """The helper died, so nobody reports this process's exit: it is gone once its pid is
        (its status is lost with the helper: -SIGKILL stands for it)."""
        try:
            os.kill(self.pid, 0)
            # (an init that does not reap leaves it a zombie: ended all the same)
            ended = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
        except (ProcessLookupError, FileNotFoundError):
            ended = True
        if ended:
            self.returncode = -signal.SIGKILL

    def send_signal(self, signal_number: int) -> None:
        if self.poll() is None:  # (as Popen: an ended process's pid may be another's by now)
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal_number)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def __repr__(self) -> str:
        return f"<ForkedProcess pid={self.pid} returncode={self.returncode}>"


class ForkServer:
    """The client's side: starts the helper and forks services from it."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self._socket = ours
        self._helper = subprocess.Popen(
            [sys.executable, "-m", __name__, str(theirs.fileno())],
            pass_fds=[theirs.fileno()],
            stdin=subprocess.DEVNULL,
            env={**os.environ, "OPENBLAS_NUM_THREADS": "1"},  # no thread in the helper: it forks
            start_new_session=True,  # a terminal's Ctrl-C is for the client (`dev up` stops in order)
        )
        theirs.close()
        self._lock = threading.Lock()  # one spawn at a time: its answer is the next "spawned"
        self.changed = threading.Condition()  # a spawn answered, a process exited, the helper lost
        self._asked: dict[int, list[str]] = {}  # spawn number → its command line, until answered
        self._answers: dict[int, ForkedProcess | str] = {}  # spawn number → its process, or why none
        self._processes: dict[int, ForkedProcess] = {}  # pid → the process, until its exit is reported
        self._next = 0
        self.lost = False
        self._ready = threading.Event()
        self._reader = threading.Thread(target=self._read, name="fork-server-reader", daemon=True)
        self._reader.start()
        if not self._ready.wait(HELPER_READY_TIMEOUT_S) or self.lost:
            self.close()
            raise RuntimeError(f"the fork server did not start (exit status {self._helper.poll()})")

    def spawn(self, module: str, arguments: list[str], env: dict[str, str], log: Path) -> ForkedProcess:
        """`python -m module *arguments` with `env`, in this process's working folder, stdout and
        stderr appended to `log`, in a session of its own."""
        with self._lock:
            if self.lost:
                raise RuntimeError("the fork server is gone")
            self._next += 1
            number = self._next
            request = {"spawn": number, "module": module, "arguments": arguments, "env": env}
            request |= {"cwd": os.getcwd(), "log": str(log)}
            with self.changed:
                self._asked[number] = [sys.executable, "-m", module, *arguments]
            self._socket.sendall(json.dumps(request).encode() + b"\n")
            with self.changed:
                if not self.changed.wait_for(lambda: number in self._answers or self.lost, SPAWN_TIMEOUT_S):
                    raise RuntimeError(f"the fork server did not answer in {SPAWN_TIMEOUT_S} s")
                answer = self._answers.pop(number, None)
            if answer is None:
                raise RuntimeError("the fork server is gone")
            if isinstance(answer, str):
                raise RuntimeError(f"the fork server could not start {module}: {answer}")
            return answer

    def _read(self) -> None:
        with self._socket.makefile("rb") as lines:
            for line in lines:
                message = json.loads(line)
                with self.changed:
                    if "ready" in message:
                        self._ready.set()
                    elif "spawned" in message:
                        # The process is known before the next message is read: a service that
                        # ends at once (bad arguments) has its exit reported right after.
                        args = self._asked.pop(message["spawned"])
                        if "error" in message:
                            self._answers[message["spawned"]] = message["error"]
                        else:
                            process = ForkedProcess(self, message["pid"], args)
                            self._processes[process.pid] = process
                            self._answers[message["spawned"]] = process
                    elif (ended := self._processes.pop(message["exited"], None)) is not None:
                        ended.returncode = message["returncode"]
                    self.changed.notify_all()
        with self.changed:
            self.lost = True
            self.changed.notify_all()
        self._ready.set()

    def close(self) -> None:
        """The helper ends (the services it forked run on: they are stopped by their owners)."""
        with contextlib.suppress(OSError):
            self._socket.shutdown(socket.SHUT_RDWR)
        try:
            self._helper.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._helper.kill()
            self._helper.wait()
        self._socket.close()


_shared: dict[str, ForkServer] = {}  # "server": this process's, once started
_shared_lock = threading.Lock()


def shared() -> ForkServer:
    """This process's fork server, started on first use (a new one if the last was lost)."""
    with _shared_lock:
        server = _shared.get("server")
        if server is None or server.lost:
            server = _shared["server"] = ForkServer()
            atexit.register(server.close)
        return server


# ---- the helper ---------------------------------------------------------------------------------


def _run_child(request: dict[str, Any], keep_out: list[int]) -> None:
    """In the forked child: become the service, as `python -u -m module` would start it."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for descriptor in keep_out:
            os.close(descriptor)
        os.setsid()
        os.chdir(request["cwd"])
        null = os.open(os.devnull, os.O_RDONLY)
        log = os.open(request["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(null)
        os.close(log)
        os.environ.clear()
        os.environ.update(request["env"])
        sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False))
        sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), write_through=True)
        sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), write_through=True, errors="backslashreplace")
        module = importlib.import_module(request["module"])
        sys.argv = [str(module.__file__), *request["arguments"]]
        module.main(request["arguments"])
        code = 0
    except SystemExit as stopped:  # as the interpreter ends on one: a message is printed, status 1
        if stopped.code is None or isinstance(stopped.code, int):
            code = stopped.code or 0
        else:
            print(stopped.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _serve(descriptor: int) -> None:
    for name in PRELOADED:
        importlib.import_module(name)
    gc.collect()
    gc.freeze()  # what the imports made stays in the pages the children share, out of their collections
    client = socket.socket(fileno=descriptor)
    wake_reader, wake_writer = socket.socketpair()
    wake_reader.setblocking(False)
    wake_writer.setblocking(False)
    signal.set_wakeup_fd(wake_writer.fileno())
    signal.signal(signal.SIGCHLD, lambda *_: None)  # (the wakeup byte is what counts)
    selector = selectors.DefaultSelector()
    selector.register(client, selectors.EVENT_READ)
    selector.register(wake_reader, selectors.EVENT_READ)
    keep_out = [client.fileno(), wake_reader.fileno(), wake_writer.fileno(), selector.fileno()]

    def send(message: dict[str, Any]) -> None:
        client.sendall(json.dumps(message).encode() + b"\n")

    send({"ready": True})
    pending = b""
    while True:
        for key, _ in selector.select():
            if key.fileobj is wake_reader:
                with contextlib.suppress(BlockingIOError):
                    while wake_reader.recv(4096):
                        pass
                while True:
                    try:
                        pid, status = os.waitpid(-1, os.WNOHANG)
                    except ChildProcessError:
                        break
                    if pid == 0:
                        break
                    send({"exited": pid, "returncode": os.waitstatus_to_exitcode(status)})  # (as Popen's)
                continue
            try:
                received = client.recv(65536)  # (a SIGCHLD meanwhile: retried, PEP 475)
            except OSError:
                received = b""
            if not received:
                return  # the client is gone or closed us: the forked services run on
            pending += received
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                request = json.loads(line)
                try:
                    pid = os.fork()
                except OSError as error:
                    send({"spawned": request["spawn"], "error": str(error)})
                    continue
                if pid == 0:
                    _run_child(request, keep_out)
                send({"spawned": request["spawn"], "pid": pid})


if __name__ == "__main__":
    _serve(int(sys.argv[1]))
