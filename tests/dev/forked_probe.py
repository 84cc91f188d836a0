"""A stand-in service for tests/dev/test_fork_server.py: `main(arguments)` as a service's is,
reporting what it was started with, then exiting with the code it is told or waiting for a signal."""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path


def main(argv: list[str] | None = None) -> None:
    report, action = (argv or sys.argv[1:])[:2]
    print("to stdout", flush=False)  # unbuffered, as PYTHONUNBUFFERED makes it: no flush needed
    print("to stderr", file=sys.stderr, flush=False)
    Path(report).write_text(
        json.dumps(
            {
                "argv": sys.argv[1:],
                "variable": os.environ.get("FORKED_PROBE"),
                "cwd": os.getcwd(),
                "pid": os.getpid(),
                "session": os.getsid(0),
                "threads": threading.active_count(),
            }
        )
    )
    if action == "wait":
        threading.Event().wait()  # until a signal ends the process
    sys.exit(int(action))


if __name__ == "__main__":
    main()
