"""A plain side effect with a reconciler, slow enough for a worker to be paused inside it.

``PAUSED_FENCED=1`` in the worker's env makes the effect go through ``outlast.fence`` in its own
transaction (the world refuses a superseded worker); unset, the effect is a bare insert.
"""

from __future__ import annotations

import os
import time
from typing import Any

from outlast import NOT_EXECUTED, App, current_action, fence
from outlast.action import Action
from outlast.fence import TABLES as FENCE_TABLES
from tests.apps import connect, setup_tables

TABLES = (
    FENCE_TABLES
    + """
CREATE TABLE IF NOT EXISTS started (id serial PRIMARY KEY, key text NOT NULL, pid int NOT NULL);
CREATE TABLE IF NOT EXISTS effects (id serial PRIMARY KEY, key text NOT NULL, pid int NOT NULL);
CREATE TABLE IF NOT EXISTS finished (id serial PRIMARY KEY, key text NOT NULL, pid int NOT NULL);
"""
)

app = App()


def setup(database_url: str, schema: str) -> None:
    setup_tables(database_url, schema, TABLES)


@app.tool("slow_effect")
def slow_effect(tag: str) -> dict[str, Any]:
    a = current_action()
    with connect() as c:
        c.execute("INSERT INTO started (key, pid) VALUES (%s, %s)", (a.idempotency_key, os.getpid()))
    time.sleep(float(os.environ.get("PAUSED_SLEEP", "2")))
    try:
        with connect() as c, c.transaction():
            if os.environ.get("PAUSED_FENCED") and not fence(c, a):
                return {"tag": tag, "already": True}
            c.execute("INSERT INTO effects (key, pid) VALUES (%s, %s)", (a.idempotency_key, os.getpid()))
        return {"tag": tag}
    finally:  # the test waits for this: whatever the tool did, it is done
        with connect() as c:
            c.execute("INSERT INTO finished (key, pid) VALUES (%s, %s)", (a.idempotency_key, os.getpid()))


@app.reconciler("slow_effect")
def slow_effect_done(args: dict[str, Any], action: Action) -> Any:
    with connect() as c:
        found = c.execute("SELECT 1 FROM effects WHERE key = %s", (action.idempotency_key,)).fetchone()
    return {"tag": args["tag"]} if found else NOT_EXECUTED


@app.workflow("one_effect")
async def one_effect(run: Any, tag: str) -> Any:
    return await run.call("slow_effect", tag=tag)
