"""Work that runs to its end when its caller is cancelled (server_common/to_the_end.py)."""

from __future__ import annotations

import asyncio

import pytest

from tidelog.server_common.to_the_end import ToTheEnd


async def test_a_cancelled_caller_leaves_the_work_running_and_finish_waits_for_it() -> None:
    steps: list[str] = []
    release = asyncio.Event()

    async def work() -> str:
        steps.append("started")
        await release.wait()
        steps.append("ended")
        return "done"

    runner = ToTheEnd()
    caller = asyncio.ensure_future(runner.run(work()))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    assert steps == ["started"]
    release.set()
    await runner.finish()
    assert steps == ["started", "ended"]
    assert await runner.run(asyncio.sleep(0, result="again")) == "again"  # a caller that waits gets the result


async def test_a_failure_reaches_the_caller_and_the_hook() -> None:
    seen: list[BaseException] = []
    runner = ToTheEnd(on_failure=seen.append)

    async def failing() -> None:
        raise OSError("disk")

    with pytest.raises(OSError, match="disk"):
        await runner.run(failing())
    runner.in_background(failing())
    await runner.finish()
    assert [str(error) for error in seen] == ["disk", "disk"]
