"""The world of tests/integration/test_status_truth.py: runs whose ``outlast status`` must say
where they are now — a receive then an approval, the first of several waits, a fan-out of child
runs, two approvals of the same arguments at once."""

from __future__ import annotations

import asyncio
from typing import Any

from outlast import App

app = App()


@app.workflow("ask_then_approve")
async def ask_then_approve(run: Any) -> str:
    """A message on 'user', then an approval of what it asked."""
    asked = await run.receive("user")
    decision = await run.approval("publish", {"text": asked}, approvers=["ops"])
    return str(decision.status)


@app.workflow("either")
async def either(run: Any) -> int:
    """The first of a message on 'user' (for an hour) and a two-hour timer."""
    won = await run.first(run.receive("user", timeout=3600), run.sleep(7200))
    return int(won.which)


@app.workflow("leaf")
async def leaf(run: Any) -> None:
    await run.sleep(3600)


@app.workflow("fan")
async def fan(run: Any, n: int = 11) -> None:
    """``n`` child runs started at once, then their results awaited."""
    children = await asyncio.gather(*(run.start("leaf", {}) for _ in range(n)))
    await asyncio.gather(*(c.result() for c in children))


@app.workflow("twice")
async def twice(run: Any) -> str:
    """The first of two approvals of the same arguments: their hashes are the same."""
    won = await run.first(
        run.approval("publish", {"n": 1}, approvers=["ops"]),
        run.approval("archive", {"n": 1}, approvers=["ops"]),
    )
    return str(won.which)
