"""The world of tests/crash/test_held_crash.py: a read whose result is held (``peek``), then one
fenced write of each kind the run can make. Every dispatch lands in ``executions`` (made by the
``world`` fixture); ``ledger`` holds what ``charge`` spent, once per idempotency key.

``HELD_PAUSE`` (seconds, in the worker's env): the ``release`` workflow waits that long in the
workflow itself (not a crossing), for the worker to be stopped there with its read's result held.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from outlast import App, Run, current_action
from tests.apps import connect, setup_tables

TABLES = """
CREATE TABLE IF NOT EXISTS ledger (key text PRIMARY KEY, run_id text NOT NULL, amount numeric NOT NULL);
"""

app = App()


def setup(database_url: str, schema: str) -> None:
    setup_tables(database_url, schema, TABLES)


def _executed(what: str) -> None:
    with connect() as c:
        c.execute("INSERT INTO executions (run_id, what) VALUES (%s, %s)", (current_action().run_id, what))


@app.tool("peek", effect="read")
def peek(what: str) -> str:
    _executed(f"peek:{what}")
    return what


@app.tool("charge", idempotent=True, cost={"usd": 2})
def charge(amount: float) -> float:
    a = current_action()
    _executed("charge")
    with connect() as c:
        c.execute(
            "INSERT INTO ledger (key, run_id, amount) VALUES (%s, %s, %s) ON CONFLICT (key) DO NOTHING",
            (a.idempotency_key, a.run_id, amount),
        )
    a.charge(usd=amount)
    return amount


@app.tool("capped", idempotent=True, max_concurrent=1)
def capped(label: str) -> str:
    _executed(f"capped:{label}")
    return label


@app.workflow("leaf")
async def leaf(run: Run) -> int:
    return 1


@app.workflow("held")
async def held(run: Run, write: str) -> dict[str, Any]:
    """A read (its result held), then the write under test, then a read."""
    first = await run.call("peek", what="first")
    if write == "finish":
        return {"first": first}
    if write == "child":
        await (await run.start("leaf")).result()
    elif write == "reserve":
        await run.call("charge", amount=2)
    elif write == "slot":
        await run.call("capped", label="x")
    elif write == "wait":
        await run.sleep(0.2)
    elif write == "release":
        await asyncio.sleep(float(os.environ.get("HELD_PAUSE", "0")))
    return {"first": first, "after": await run.call("peek", what="after")}
