"""Sync tools on reused threads, in a real worker (in this process, real Redis and Postgres):
hung tools, more of them than the pool keeps, never starve another run's sync tool, and the
worker's heartbeat record shows its tool threads."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from outlast import App, Client
from outlast.testing.worker import InProcessWorker
from outlast.worker.threads import TOOL_THREADS
from tests.conftest import World, wait_for

app = App()
release = threading.Event()
inside = {"n": 0}
lock = threading.Lock()


@app.tool("block", effect="read")
def block(i: int) -> int:
    with lock:
        inside["n"] += 1
    release.wait(120)
    return i


@app.tool("quick")
def quick() -> str:
    return "done"


@app.workflow("many_blocked")
async def many_blocked(run: Any, n: int) -> list[int]:
    return list(await asyncio.gather(*(run.call("block", i=i) for i in range(n))))


@app.workflow("one_quick")
async def one_quick(run: Any) -> str:
    result: str = await run.call("quick")
    return result


def _threads(world: World) -> tuple[int, int]:
    rows = world.sql("SELECT tool_threads, tool_threads_busy FROM workers")
    return (rows[0][0], rows[0][1]) if rows else (0, 0)


def test_hung_sync_tools_beyond_the_pool_never_starve_another_runs_tool(world: World) -> None:
    release.clear()
    inside["n"] = 0
    worker = InProcessWorker(app, world.settings(concurrency=2), ["default"])
    worker.start()
    try:
        with Client(settings=world.settings()) as c:
            n = max(TOOL_THREADS.base, TOOL_THREADS.count) + 2  # more than the pool has or keeps
            blocked = c.enqueue("many_blocked", {"n": n})
            wait_for(lambda: inside["n"] == n, 30, what=f"{n} calls of the hung tool")
            done = c.wait(c.enqueue("one_quick", {}).id, timeout=30)
            assert (done.state, done.result) == ("succeeded", "done")
            assert c.status(blocked.id).state == "running"  # its tools still hang
            # The heartbeat record shows the threads: every hung one busy, and the quick one's.
            threads, busy = wait_for(
                lambda: (t := _threads(world))[1] >= n and t, 30, what="the threads in the heartbeat record"
            )
            assert threads >= n + 1 and busy <= threads
            release.set()
            assert c.wait(blocked.id, timeout=30).state == "succeeded"
    finally:
        release.set()
        worker.stop()
