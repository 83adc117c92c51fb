"""Workflows and tools with concurrency caps and rate limits. Every tool and workflow body writes
a row to the test's own `observed` table (the database clock), so tests count in the world how
many ran at once and how many requests fell in any window."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import psycopg

from outlast import App, RateLimited, Retry, current_action

app = App()


def observe(run_id: str, what: str, key: str = "") -> None:
    url = os.environ["OUTLAST_DATABASE_URL"]
    schema = os.environ["OUTLAST_SCHEMA"]
    with psycopg.connect(url, autocommit=True, options=f"-c search_path={schema}") as c:
        c.execute(
            "INSERT INTO observed (run_id, what, key, pid, at) VALUES (%s, %s, %s, %s, clock_timestamp())",
            (run_id, what, key, os.getpid()),
        )


@app.workflow("per_customer", max_concurrent=1, concurrency_key=lambda i: i["customer"])
async def per_customer(run: Any, customer: str, seconds: float = 0.3) -> str:
    observe(run.run_id, "start", customer)
    await asyncio.sleep(seconds)
    observe(run.run_id, "end", customer)
    return customer


@app.workflow("per_tenant", max_concurrent=1, concurrency_key="tenant")
async def per_tenant(run: Any, seconds: float = 0.5) -> str | None:
    observe(run.run_id, "start", run.tenant or "none")
    await asyncio.sleep(seconds)
    observe(run.run_id, "end", run.tenant or "none")
    return str(run.tenant)


def tenant_region(run_input: dict[str, Any], tenant: str | None) -> str:
    return f"{tenant}/{run_input['region']}"


@app.workflow("per_tenant_region", max_concurrent=1, concurrency_key=tenant_region)
async def per_tenant_region(run: Any, region: str, seconds: float = 0.5) -> str | None:
    observe(run.run_id, "start", f"{run.tenant}/{region}")
    await asyncio.sleep(seconds)
    observe(run.run_id, "end", f"{run.tenant}/{region}")
    return str(run.tenant)


@app.workflow("capped", max_concurrent=2)
async def capped(run: Any, seconds: float = 0.3) -> str:
    observe(run.run_id, "start", "capped")
    await asyncio.sleep(seconds)
    observe(run.run_id, "end", "capped")
    return "done"


@app.tool("narrow", effect="read", max_concurrent=3)
def narrow(n: int, seconds: float = 0.2) -> int:
    a = current_action()
    observe(a.run_id, "start", "narrow")
    time.sleep(seconds)
    observe(a.run_id, "end", "narrow")
    return n


@app.workflow("fan_out")
async def fan_out(run: Any, n: int = 4) -> list[int]:
    return list(await asyncio.gather(*(run.call("narrow", n=i) for i in range(n))))


@app.tool("ask_model", rate={"requests": "6/3s", "tokens": "1000/3s"}, cost={"tokens": 100})
def ask_model(prompt: str) -> str:
    a = current_action()
    observe(a.run_id, "request", "ask_model")
    a.charge(tokens=50)
    return prompt.upper()


@app.workflow("chat")
async def chat(run: Any, n: int = 3) -> list[str]:
    return [await run.call("ask_model", prompt=f"p{i}") for i in range(n)]


@app.tool("busy_api", retry=Retry(attempts=1))
def busy_api(n: int) -> int:
    a = current_action()
    observe(a.run_id, "call", a.idempotency_key)
    url, schema = os.environ["OUTLAST_DATABASE_URL"], os.environ["OUTLAST_SCHEMA"]
    with psycopg.connect(url, autocommit=True, options=f"-c search_path={schema}") as c:
        seen = c.execute(
            "SELECT count(*) FROM observed WHERE what = 'call' AND key = %s", (a.idempotency_key,)
        ).fetchone()
    if seen is not None and seen[0] <= 2:
        raise RateLimited(retry_after=0.3)
    return n


@app.workflow("polite")
async def polite(run: Any, n: int = 1) -> int:
    return int(await run.call("busy_api", n=n))


@app.workflow("hog", max_concurrent=1)
async def hog(run: Any, seconds: float = 30.0) -> str:
    observe(run.run_id, "start", "hog")
    await asyncio.sleep(seconds)
    return "done"


@app.tool("solo", max_concurrent=1)
def solo(seconds: float = 2.5) -> str:
    a = current_action()
    observe(a.run_id, "start", "solo")
    time.sleep(seconds)
    observe(a.run_id, "end", "solo")
    return "ok"


@app.workflow("solo_call")
async def solo_call(run: Any, seconds: float = 2.5) -> str:
    return str(await run.call("solo", seconds=seconds))


@app.tool("scarce", effect="read", rate={"requests": "1/min"})
def scarce(n: int) -> int:
    observe(current_action().run_id, "scarce", str(n))
    return n


@app.workflow("two_scarce")
async def two_scarce(run: Any) -> list[int]:
    return [await run.call("scarce", n=1), await run.call("scarce", n=2)]


@app.workflow("two_scarce_at_once")
async def two_scarce_at_once(run: Any) -> list[Any]:
    # A third call, under way for 8 s, keeps the second's wait for the rate in the worker that
    # long (with the first call done, it would be alone after a second, and park the run): long
    # enough for `outlast status` to be seen saying so on a loaded machine.
    return list(
        await asyncio.gather(
            run.call("scarce", n=1), run.call("scarce", n=2), run.call("slow_work", seconds=8)
        )
    )


@app.tool("scarce_paid", effect="read", rate={"requests": "1/min"}, cost={"usd": 1})
def scarce_paid(n: int) -> int:
    observe(current_action().run_id, "scarce_paid", str(n))
    return n


@app.workflow("two_scarce_paid")
async def two_scarce_paid(run: Any) -> list[int]:
    return [await run.call("scarce_paid", n=1), await run.call("scarce_paid", n=2)]


@app.workflow("two_scarce_paid_at_once")
async def two_scarce_paid_at_once(run: Any) -> list[int]:
    return list(await asyncio.gather(run.call("scarce_paid", n=1), run.call("scarce_paid", n=2)))


@app.tool("once_in_5s", effect="write", rate={"requests": "1/5s"})
def once_in_5s(n: int) -> int:
    observe(current_action().run_id, "once_in_5s", str(n))
    return n


@app.tool("slow_work", effect="write")
def slow_work(seconds: float) -> str:
    observe(current_action().run_id, "slow_work", "slow_work")
    time.sleep(seconds)
    return "worked"


@app.workflow("slow_child")
async def slow_child(run: Any, seconds: float = 3.0) -> str:
    return str(await run.call("slow_work", seconds=seconds))


@app.workflow("rate_beside_child")
async def rate_beside_child(run: Any, seconds: float = 3.0) -> list[Any]:
    """The second call waits past ``SLOT_WAIT`` for the rate beside a wait for a child."""
    first = await run.call("once_in_5s", n=1)
    child = await run.start("slow_child", {"seconds": seconds})
    second, got = await asyncio.gather(run.call("once_in_5s", n=2), child.result())
    return [first, second, got]


@app.workflow("rate_beside_sleep")
async def rate_beside_sleep(run: Any, seconds: float = 3.0) -> list[Any]:
    """The second call waits past ``SLOT_WAIT`` for the rate beside a durable sleep."""
    first = await run.call("once_in_5s", n=1)
    second, _ = await asyncio.gather(run.call("once_in_5s", n=2), run.sleep(seconds))
    return [first, second]


@app.workflow("rate_after_child_task")
async def rate_after_child_task(run: Any, seconds: float = 3.0) -> list[Any]:
    """As ``rate_beside_child``, with the wait for the child in a task of its own, awaited last."""
    first = await run.call("once_in_5s", n=1)
    child = await run.start("slow_child", {"seconds": seconds})
    waiting = asyncio.ensure_future(child.result())
    second = await run.call("once_in_5s", n=2)
    return [first, second, await waiting]
