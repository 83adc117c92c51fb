"""The fault tests' world: every execution of a tool leaves one row in ``effects``, so that a test
can count, per (run, operation), what really happened after servers were stopped, flushed or
paused and workers were killed.

The ``effects`` table lives where ``FAULTS_EFFECTS_URL`` / ``FAULTS_EFFECTS_SCHEMA`` say (default:
the worker's own ``OUTLAST_DATABASE_URL`` / ``OUTLAST_SCHEMA``). The fault tests keep it on a
server they never stop: the tools' world stays up while outlast's storage goes down.

- ``effect``: a plain tool (no idempotency promise, no reconciler): a lost result makes it in doubt;
- ``slow_effect``: the same after sleeping ``seconds``;
- ``large_effect``: the same, whose result carries a large text (held in the payload store);
- ``receipt``: an idempotent tool: one ``receipts`` row per idempotency key, its dispatches counted;
- ``reconciled``: a plain tool whose reconciler looks its row up by idempotency key. The world
  fences writers (``fences``: the highest fencing token seen per key): the reconciler records its
  token before it looks, so a stale worker still inside the tool cannot add the row after the
  reconciler said NOT_EXECUTED. It says NOT_EXECUTED only when the row is certainly absent;
- ``hang``: sync, leaves its row and then sleeps an hour;
- ``hang_limited`` / ``hang_read``: the same with ``timeout=1.0`` (a plain and a read tool).
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from outlast import NOT_EXECUTED, App, current_action
from outlast.action import Action
from outlast.errors import ToolError

TABLES = """
CREATE TABLE IF NOT EXISTS effects (
    id serial PRIMARY KEY,
    run_id text NOT NULL,
    op_id text NOT NULL,
    tool text NOT NULL,
    key text NOT NULL,
    token bigint NOT NULL,
    pid int NOT NULL,
    at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX IF NOT EXISTS effects_by_key ON effects (key);
CREATE TABLE IF NOT EXISTS fences (key text PRIMARY KEY, token bigint NOT NULL);
CREATE TABLE IF NOT EXISTS receipts (
    key text PRIMARY KEY,
    run_id text NOT NULL,
    op_id text NOT NULL,
    calls int NOT NULL DEFAULT 1
);
"""

HOUR = 3600.0


def where() -> tuple[str, str]:
    """The effects table's database and schema, from the worker's environment."""
    url = os.environ.get("FAULTS_EFFECTS_URL") or os.environ["OUTLAST_DATABASE_URL"]
    schema = os.environ.get("FAULTS_EFFECTS_SCHEMA") or os.environ["OUTLAST_SCHEMA"]
    return url, schema


def setup(database_url: str, schema: str) -> None:
    """Create the effects tables in ``schema`` (idempotent)."""
    with psycopg.connect(database_url, autocommit=True) as c:
        c.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"'.encode())
        c.execute(f'SET search_path = "{schema}"'.encode())
        c.execute(TABLES.encode())


# One pool per event loop (a worker process has one): a connection per call would cost a backend
# fork per operation and throttle the load test on the world, not on outlast.
_pools: dict[int, asyncio.Task[AsyncConnectionPool]] = {}


async def _open_pool() -> AsyncConnectionPool:
    url, schema = where()
    pool = AsyncConnectionPool(
        url,
        kwargs={"autocommit": True, "options": f"-c search_path={schema}"},
        min_size=1,
        max_size=6,
        open=False,
    )
    await pool.open(wait=True, timeout=30)
    return pool


async def _pool() -> AsyncConnectionPool:
    loop = id(asyncio.get_running_loop())
    task = _pools.get(loop)
    if task is None or (task.done() and task.exception() is not None):
        task = _pools[loop] = asyncio.ensure_future(_open_pool())
    return await task


async def _insert(a: Action) -> dict[str, Any]:
    pool = await _pool()
    async with pool.connection() as c:
        return await _insert_on(c, a)


async def _insert_on(c: Any, a: Action) -> dict[str, Any]:
    """One effect row for the action, on a connection (inside the caller's transaction, if any)."""
    cur = await c.execute(
        "INSERT INTO effects (run_id, op_id, tool, key, token, pid) VALUES (%s, %s, %s, %s, %s, %s) "
        "RETURNING id",
        (a.run_id, a.operation_id, a.tool, a.idempotency_key, a.fencing_token, os.getpid()),
    )
    row = await cur.fetchone()
    assert row is not None
    return {"effect": row[0], "op": a.operation_id}


def _insert_sync(a: Action) -> None:
    url, schema = where()
    with psycopg.connect(url, autocommit=True, options=f"-c search_path={schema}") as c:
        c.execute(
            "INSERT INTO effects (run_id, op_id, tool, key, token, pid) VALUES (%s, %s, %s, %s, %s, %s)",
            (a.run_id, a.operation_id, a.tool, a.idempotency_key, a.fencing_token, os.getpid()),
        )


app = App()


@app.tool("effect")
async def effect(i: int) -> dict[str, Any]:
    return await _insert(current_action())


@app.tool("slow_effect")
async def slow_effect(i: int, seconds: float) -> dict[str, Any]:
    await asyncio.sleep(seconds)
    return await _insert(current_action())


@app.tool("large_effect")
async def large_effect(i: int, seconds: float, size: int) -> dict[str, Any]:
    """``slow_effect`` whose result carries ``size`` characters besides: a value held by reference
    in the payload store (a distinct one per effect)."""
    await asyncio.sleep(seconds)
    done = await _insert(current_action())
    return {**done, "text": f"{done['effect']:>10}\n" * (size // 11)}


@app.tool("receipt", idempotent=True)
async def receipt(i: int, seconds: float = 0.0) -> dict[str, Any]:
    """An idempotent tool as the world keeps its promise: one receipt per idempotency key, however
    many times it is dispatched (``calls`` counts the dispatches)."""
    a = current_action()
    await asyncio.sleep(seconds)
    pool = await _pool()
    async with pool.connection() as c:
        await c.execute(
            "INSERT INTO receipts (key, run_id, op_id) VALUES (%s, %s, %s) "
            "ON CONFLICT (key) DO UPDATE SET calls = receipts.calls + 1",
            (a.idempotency_key, a.run_id, a.operation_id),
        )
    return {"op": a.operation_id}


@app.tool("reconciled")
async def reconciled(i: int, seconds: float = 0.0) -> dict[str, Any]:
    a = current_action()
    await asyncio.sleep(seconds)
    pool = await _pool()
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
        return await _insert_on(c, a)


@app.reconciler("reconciled")
async def reconciled_done(args: dict[str, Any], action: Action) -> Any:
    # Any error here (the world unreachable) propagates: unsure means raise, never guess.
    pool = await _pool()
    async with pool.connection() as c, c.transaction():
        # Fence first: from this commit on, a writer with an older token is refused, so "absent"
        # below stays true.
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


@app.tool("hang")
def hang(i: int) -> dict[str, Any]:
    _insert_sync(current_action())
    time.sleep(HOUR)
    return {"woke": True}


def _with_timeout(name: str, seconds: float, **kw: Any) -> Any:
    """``@app.tool(name, timeout=seconds)``, or without the keyword where this outlast does not know
    it yet (the tests then see the tool hang and say so, instead of every test failing to import)."""
    try:
        return app.tool(name, timeout=seconds, **kw)  # type: ignore[call-arg]
    except TypeError:
        global TIMEOUT_SUPPORTED
        TIMEOUT_SUPPORTED = False
        return app.tool(name, **kw)


TIMEOUT_SUPPORTED = True


@_with_timeout("hang_limited", 1.0)
def hang_limited(i: int) -> dict[str, Any]:
    _insert_sync(current_action())
    time.sleep(HOUR)
    return {"woke": True}


@_with_timeout("hang_read", 1.0, effect="read")
def hang_read(i: int) -> dict[str, Any]:
    time.sleep(HOUR)
    return {"woke": True}


@app.workflow("chain")
async def chain(run: Any, tool: str = "effect", n: int = 5, seconds: float = 0.0) -> dict[str, Any]:
    """``n`` calls of one tool, one after the other."""
    out = []
    for i in range(n):
        args: dict[str, Any] = {"i": i}
        if seconds:
            args["seconds"] = seconds
        out.append(await run.call(tool, **args))
    return {"results": out}


@app.workflow("large_chain")
async def large_chain(run: Any, n: int = 5, seconds: float = 0.0, size: int = 100_000) -> dict[str, Any]:
    """``n`` calls of ``large_effect``, one after the other; the result says only their lengths."""
    out = [await run.call("large_effect", i=i, seconds=seconds, size=size) for i in range(n)]
    return {"effects": [r["effect"] for r in out], "lengths": [len(r["text"]) for r in out]}


MIXED = ("reconciled", "slow_effect", "reconciled", "slow_effect", "reconciled")


@app.workflow("mixed")
async def mixed(run: Any, seconds: float = 0.0) -> dict[str, Any]:
    """Five calls alternating a reconciled and a plain tool: op-1, op-3, op-5 are reconciled."""
    out = [await run.call(tool, i=i, seconds=seconds) for i, tool in enumerate(MIXED)]
    return {"results": out}


@app.workflow("stuck")
async def stuck(run: Any, tool: str = "hang") -> dict[str, Any]:
    """A plain effect, a call of a hanging tool (op-2), a plain effect."""
    first = await run.call("effect", i=0)
    hung = await run.call(tool, i=1)
    last = await run.call("effect", i=2)
    return {"first": first, "hung": hung, "last": last}


@app.workflow("stuck_read")
async def stuck_read(run: Any) -> dict[str, Any]:
    """A plain effect, a hanging read with a timeout (op-2) whose error the workflow catches, a plain
    effect."""
    first = await run.call("effect", i=0)
    try:
        seen: Any = await run.call("hang_read", i=1)
    except ToolError as exc:
        seen = {"error": type(exc).__name__, "message": str(exc)}
    last = await run.call("effect", i=2)
    return {"first": first, "read": seen, "last": last}
