"""A service process's life (server_common/runtime.py run_process): it ends at once after its main
coroutine, with what it wrote flushed, and a failure still ends it with a traceback and status 1."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def _run(body: str) -> subprocess.CompletedProcess[str]:
    program = textwrap.dedent(
        """
        import sys, threading
        from tidelog.server_common.runtime import run_process

        async def main() -> None:
        """
    ) + textwrap.indent(textwrap.dedent(body), "    ")
    program += "\nrun_process(main())\nprint('never reached')\n"
    return subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=30, check=False)


def test_the_process_ends_once_main_returns_with_its_output_flushed() -> None:
    done = _run(
        """
        threading.Thread(target=threading.Event().wait, name="idle").start()  # would hold an exit up
        print("to stdout", end="")  # no newline: still in the buffer of a piped stdout
        sys.stderr.write("to stderr")
        """
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "to stdout", "to stderr")


def test_a_failure_ends_the_process_with_its_traceback_and_status_1() -> None:
    done = _run(
        """
        raise RuntimeError("the service could not start")
        """
    )
    assert done.returncode == 1 and "RuntimeError: the service could not start" in done.stderr
