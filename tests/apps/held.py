"""The world of tests/crash/test_held_crash.py: a read whose result is held (``peek``), then one
fenced write of each kind the run can make (``held``), or a write beside a parallel call whose
result is held when it is made (``beside``). Every dispatch lands in ``executions`` (made by the
``world`` fixture); ``ledger`` holds what ``charge`` and ``rated`` spent, once per idempotency key;
``marks`` the effects of ``mark``, once per key; ``stuck`` lands its effect in ``executions`` and
never answers within its timeout.

``HELD_PAUSE`` (seconds, in the worker's env): the ``release`` workflow waits that long in the
workflow itself (not a crossing), for the worker to be stopped there with its read's result held.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from outlast import App, Run, current_action
from tests.apps import connect, setup_tables

TABLES = """
CREATE TABLE IF NOT EXISTS ledger (key text PRIMARY KEY, run_id text NOT NULL, amount numeric NOT NULL);
CREATE TABLE IF NOT EXISTS marks (key text PRIMARY KEY, run_id text NOT NULL);
"""

# What ``peek_after`` waits for before it answers, so that its result is held only once the
# sibling crossing is past the append it makes first (a result held earlier would ride with it).
SEEN = {
    "approval asked": "SELECT 1 FROM journal WHERE run_id = %s AND kind = 'approval'",
    "stuck dispatched": "SELECT 1 FROM executions WHERE run_id = %s AND what = 'stuck'",
}

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


@app.tool("peek_after", effect="read")
def peek_after(what: str, seen: str) -> str:
    """A read that answers once ``seen`` (a key of ``SEEN``) is true of its run."""
    run_id = current_action().run_id
    until = time.monotonic() + 30
    with connect() as c:
        while not c.execute(SEEN[seen], (run_id,)).fetchone() and time.monotonic() < until:
            time.sleep(0.02)
    _executed(f"peek:{what}")
    return what


def _spend(name: str, amount: float) -> float:
    a = current_action()
    _executed(name)
    with connect() as c:
        c.execute(
            "INSERT INTO ledger (key, run_id, amount) VALUES (%s, %s, %s) ON CONFLICT (key) DO NOTHING",
            (a.idempotency_key, a.run_id, amount),
        )
    a.charge(usd=amount)
    return amount


@app.tool("charge", idempotent=True, cost={"usd": 2})
def charge(amount: float) -> float:
    return _spend("charge", amount)


@app.tool("rated", idempotent=True, cost={"usd": 1}, rate={"requests": "1/3s"})
def rated(n: int) -> float:
    """Rate limited: a second call within 3 s waits for room, or parks its run."""
    return _spend(f"rated:{n}", 1)


@app.tool("mark", idempotent=True)
def mark(label: str) -> str:
    """An idempotent effect whose result is held (no cost, rate or cap)."""
    a = current_action()
    _executed(f"mark:{label}")
    with connect() as c:
        c.execute(
            "INSERT INTO marks (key, run_id) VALUES (%s, %s) ON CONFLICT (key) DO NOTHING",
            (a.idempotency_key, a.run_id),
        )
    return label


@app.tool("stuck", timeout=1.0)
def stuck() -> str:
    """A plain effect that lands, then never answers within its timeout: in doubt."""
    _executed("stuck")
    time.sleep(5)
    return "late"


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


async def _cancel_seen(run: Run) -> None:
    """Not a crossing: wait until this worker has learned of the run's cancellation (its
    heartbeat), so that the next crossing journals it. A look inside the run, for the test only."""
    control = run._control
    for _ in range(600):
        if control.cancel.is_set():
            return
        await asyncio.sleep(0.05)


@app.workflow("beside")
async def beside(run: Run, write: str) -> dict[str, Any]:
    """The write under test made while a parallel call's result is held (a gather), then a
    read. ``cancel``: a held result, then the cancellation journaled at the next crossing."""
    if write == "park":  # the rate's window filled; its second call parks the run once alone
        await run.call("rated", n=1)
        first, _ = await asyncio.gather(run.call("peek", what="first"), run.call("rated", n=2))
    elif write == "approval":
        first, _ = await asyncio.gather(
            run.call("peek_after", what="first", seen="approval asked"),
            run.approval("ship", {"what": "first"}, approvers=["ops"]),
        )
    elif write == "child_wait":
        child = await run.start("leaf", queue="kids")  # no worker serves it until the takeover
        first, _ = await asyncio.gather(run.call("peek", what="first"), child.result())
    elif write == "cancel":
        first = await run.call("mark", label="first")
        await _cancel_seen(run)
    elif write == "in_doubt":
        first, _ = await asyncio.gather(
            run.call("peek_after", what="first", seen="stuck dispatched"), run.call("stuck")
        )
    return {"first": first, "after": await run.call("peek", what="after")}
