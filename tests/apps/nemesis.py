"""The nemesis's workload (tests/nemesis): payments, approvals, durable timers, child runs and
conversations (runs that take messages), over a
world of tables on a Postgres the nemesis never touches (``FAULTS_EFFECTS_URL`` and
``FAULTS_EFFECTS_SCHEMA``, as tests/apps/faults.py).

- ``transfer``: idempotent; the bank keeps one ``ledger`` row per idempotency key and counts the
  dispatches (``calls``);
- ``notify``: plain, with a reconciler that looks its ``effects`` row up by idempotency key (the
  world fences writers by token, as faults.py's ``reconciled``);
- ``audit``: plain, no promise: one ``effects`` row per dispatch, so a silent repeat shows;
- ``take``: idempotent; one ``taken`` row per idempotency key for each message a chat run took.

A transfer spends its amount from the run's budget (500 reserved, then ``charge``): what outlast
records as spent must equal the ledger's amounts.

``pace`` (seconds) makes a tool sleep a random part of it first, so that faults land inside tools.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

from outlast import NOT_EXECUTED, App, current_action
from outlast.action import Action
from tests.apps import faults as world

TABLES = (
    world.TABLES
    + """
CREATE TABLE IF NOT EXISTS ledger (key text PRIMARY KEY, run_id text NOT NULL, op_id text NOT NULL,
    amount int NOT NULL, token bigint NOT NULL, calls int NOT NULL DEFAULT 1);
CREATE TABLE IF NOT EXISTS taken (key text PRIMARY KEY, run_id text NOT NULL, op_id text NOT NULL,
    sender int NOT NULL, n int NOT NULL, calls int NOT NULL DEFAULT 1);
"""
)

app = App()


def setup(database_url: str, schema: str) -> None:
    """Create the world's tables in ``schema`` (idempotent)."""
    import psycopg

    with psycopg.connect(database_url, autocommit=True) as c:
        c.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"'.encode())
        c.execute(f'SET search_path = "{schema}"'.encode())
        c.execute(TABLES.encode())


async def _pace(pace: float) -> None:
    if pace:
        await asyncio.sleep(random.uniform(0, pace))


@app.tool("transfer", idempotent=True, cost={"usd": 500})
async def transfer(amount: int, pace: float = 0.0) -> dict[str, Any]:
    a = current_action()
    a.charge(usd=amount)
    await _pace(pace)
    pool = await world._pool()
    async with pool.connection() as c:
        await c.execute(
            "INSERT INTO ledger (key, run_id, op_id, amount, token) VALUES (%s, %s, %s, %s, %s) "
            "ON CONFLICT (key) DO UPDATE SET calls = ledger.calls + 1",
            (a.idempotency_key, a.run_id, a.operation_id, amount, a.fencing_token),
        )
    return {"paid": amount}


@app.tool("notify")
async def notify(amount: int, pace: float = 0.0) -> dict[str, Any]:
    a = current_action()
    await _pace(pace)
    pool = await world._pool()
    async with pool.connection() as c, c.transaction():
        cur = await c.execute(
            "INSERT INTO fences (key, token) VALUES (%s, %s) ON CONFLICT (key) DO UPDATE "
            "SET token = greatest(fences.token, EXCLUDED.token) RETURNING token",
            (a.idempotency_key, a.fencing_token),
        )
        fence = await cur.fetchone()
        assert fence is not None
        if fence[0] > a.fencing_token:
            raise RuntimeError(f"stale writer: token {a.fencing_token} < {fence[0]} for {a.idempotency_key}")
        return await world._insert_on(c, a)


@app.reconciler("notify")
async def notify_done(args: dict[str, Any], action: Action) -> Any:
    pool = await world._pool()
    async with pool.connection() as c, c.transaction():
        await c.execute(
            "INSERT INTO fences (key, token) VALUES (%s, %s) ON CONFLICT (key) DO UPDATE "
            "SET token = greatest(fences.token, EXCLUDED.token)",
            (action.idempotency_key, action.fencing_token),
        )
        cur = await c.execute("SELECT id FROM effects WHERE key = %s ORDER BY id", (action.idempotency_key,))
        rows = await cur.fetchall()
    if not rows:
        return NOT_EXECUTED
    return {"effect": rows[0][0], "op": action.operation_id}


@app.tool("take", idempotent=True)
async def take(sender: int, n: int, pace: float = 0.0) -> dict[str, Any]:
    a = current_action()
    await _pace(pace)
    pool = await world._pool()
    async with pool.connection() as c:
        await c.execute(
            "INSERT INTO taken (key, run_id, op_id, sender, n) VALUES (%s, %s, %s, %s, %s) "
            "ON CONFLICT (key) DO UPDATE SET calls = taken.calls + 1",
            (a.idempotency_key, a.run_id, a.operation_id, sender, n),
        )
    return {"took": [sender, n]}


@app.tool("audit")
async def audit(what: str, pace: float = 0.0) -> dict[str, Any]:
    await _pace(pace)
    return await world._insert(current_action())


async def pay(run: Any, amount: int, pace: float) -> dict[str, Any]:
    """A transfer, its notice, its audit line."""
    paid = await run.call("transfer", amount=amount, pace=pace)
    told = await run.call("notify", amount=amount, pace=pace)
    noted = await run.call("audit", what=f"paid {amount}", pace=pace)
    return {"paid": paid, "told": told, "noted": noted}


@app.workflow("payment")
async def payment(run: Any, amount: int, pace: float = 0.3) -> dict[str, Any]:
    return await pay(run, amount, pace)


@app.workflow("approved")
async def approved(run: Any, amount: int, pace: float = 0.3) -> dict[str, Any]:
    """A payment someone of ``ops`` approves first (a client of the nemesis decides)."""
    d = await run.approval("pay", {"amount": amount}, approvers=["ops"])
    return await pay(run, int(d.args["amount"]), pace)


@app.workflow("timer")
async def timer(run: Any, seconds: float, pace: float = 0.3) -> dict[str, Any]:
    """A durable timer, then an audit line."""
    await run.sleep(seconds)
    return {"noted": await run.call("audit", what="woke", pace=pace)}


@app.workflow("parent")
async def parent(run: Any, amount: int, pace: float = 0.3) -> dict[str, Any]:
    """Two child payments, awaited, then an audit line."""
    children = [await run.start("payment", {"amount": amount + k, "pace": pace}) for k in range(2)]
    results = [await child.result() for child in children]
    return {"children": results, "noted": await run.call("audit", what="both paid", pace=pace)}


@app.workflow("chat")
async def chat(run: Any, each: int, pace: float = 0.3) -> dict[str, Any]:
    """``each`` messages from each of the two producers, each driving the ``take`` tool."""
    took = []
    for _ in range(2 * each):
        m = await run.receive("m")
        took.append((await run.call("take", sender=m["from"], n=m["n"], pace=pace))["took"])
    return {"took": took}
