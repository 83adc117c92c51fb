"""The bench's workload, importable by worker processes (outlast's and RQ's): one trivial
idempotent step, an outlast workflow that calls it K times, and the same K steps as one RQ job."""

from __future__ import annotations

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


@app.workflow("steps", version="1")
async def steps(run: Any, k: int, tool: str = "bump") -> int:
    x = 0
    for _ in range(k):
        x = await run.call(tool, x=x)
    return x


def rq_steps(k: int) -> int:
    """The same K steps as one RQ job: nothing is recorded between them."""
    x = 0
    for _ in range(k):
        x = bump(x)
    return x
