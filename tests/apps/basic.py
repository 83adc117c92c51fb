"""Workflows for the foundation's tests. Their bodies write to the test's own `executions` table
(in the schema the worker serves), so tests count what really ran."""

from __future__ import annotations

import asyncio
import os
import signal
from typing import Any

import psycopg

from outlast import App

app = App()


def record(run_id: str, what: str) -> None:
    url = os.environ["OUTLAST_DATABASE_URL"]
    schema = os.environ["OUTLAST_SCHEMA"]
    with psycopg.connect(url, autocommit=True, options=f"-c search_path={schema}") as c:
        c.execute("INSERT INTO executions (run_id, what) VALUES (%s, %s)", (run_id, what))


@app.workflow("echo")
async def echo(run: Any, **input: Any) -> dict[str, Any]:
    record(run.run_id, "echo")
    return {"echo": input}


@app.workflow("slow")
async def slow(run: Any, seconds: float = 1.0, tag: str = "") -> dict[str, Any]:
    record(run.run_id, f"start:{os.getpid()}")
    await asyncio.sleep(seconds)
    record(run.run_id, f"end:{os.getpid()}")
    return {"slept": seconds, "pid": os.getpid(), "tag": tag}


@app.workflow("suicide")
async def suicide(run: Any) -> None:
    record(run.run_id, "suicide")
    os.kill(os.getpid(), signal.SIGKILL)


@app.workflow("boom", fails_on=(ValueError,))
async def boom(run: Any) -> None:
    raise ValueError("the workflow broke on purpose")


@app.tool("square", effect="read")
def square(n: int) -> int:
    return n * n


@app.tool("fragile")
def fragile(n: int) -> int:
    raise RuntimeError(f"fragile broke on {n}")


@app.workflow("squares")
async def squares(run: Any, n: int = 3) -> dict[str, Any]:
    values = [await run.call("square", n=i) for i in range(n)]
    try:
        await run.call("fragile", n=n)
    except Exception as exc:
        return {"values": values, "error": str(exc)}
    return {"values": values}
