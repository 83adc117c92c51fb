"""The bench's workload, importable by worker processes (outlast's and RQ's): one trivial
idempotent step, an outlast workflow that calls it K times, and the same K steps as one RQ job;
and the small workflows the probes use (latency, memory, recovery, replay)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from outlast import App

app = App()


def bump(x: int) -> int:
    return x + 1


@app.tool("bump", idempotent=True)
async def bump_tool(x: int) -> int:
    return bump(x)


@app.tool("bump_sync", idempotent=True)
def bump_sync_tool(x: int) -> int:
    return bump(x)  # a sync tool: outlast runs it in a thread


@app.tool("bump_read", effect="read")
def bump_read_tool(x: int) -> int:
    return bump(x)  # a read: nothing to record before it runs


@app.tool("nap", idempotent=True)
async def nap(seconds: float) -> float:
    await asyncio.sleep(seconds)
    return seconds


@app.workflow("steps", version="1")
async def steps(run: Any, k: int, tool: str = "bump") -> int:
    x = 0
    for _ in range(k):
        x = await run.call(tool, x=x)
    return x


@app.workflow("timed", version="1")
async def timed(run: Any, k: int) -> list[float]:
    """When the workflow started (wall clock, same machine as the producer) and ended its K steps."""
    started = time.time()
    x = 0
    for _ in range(k):
        x = await run.call("bump", x=x)
    return [started, time.time()]


@app.workflow("hold", version="1")
async def hold(run: Any, seconds: float) -> float:
    """One operation that takes ``seconds``: keeps a run in flight (memory, takeover)."""
    return float(await run.call("nap", seconds=seconds))


@app.workflow("resume_probe", version="1")
async def resume_probe(run: Any, k: int) -> float:
    """K steps, a durable sleep, then (on the resume pass only) the seconds the workflow took
    from its start to the first crossing past the journal: the replay of K journaled steps."""
    started = time.perf_counter()
    x = 0
    for _ in range(k):
        x = await run.call("bump", x=x)
    await run.sleep(0.2)
    return time.perf_counter() - started


def rq_steps(k: int) -> int:
    """The same K steps as one RQ job: nothing is recorded between them."""
    x = 0
    for _ in range(k):
        x = bump(x)
    return x


def peer_stamp(sent: float) -> None:
    """A peer's job for the latency probe: notes how long after ``sent`` it started (RQ)."""
    import rq

    started = time.time()
    job = rq.get_current_job()
    assert job is not None
    job.connection.rpush("bench:lat", started - sent)
