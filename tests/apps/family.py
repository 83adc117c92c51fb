"""The world of tests/integration/test_children.py: parents, their child runs and tenants.

Every dispatch of ``work`` lands in the ``executions`` table of the test's schema (made by the
``world`` fixture), so a test counts how many times a child really did its work. ``gate`` waits
(a read: redone freely after a crash) until a row of ``gates`` opens it.
"""

from __future__ import annotations

import asyncio
from typing import Any

from outlast import App, Child, ChildFailed, Run, current_action
from tests.apps import connect, setup_tables

TABLES = "CREATE TABLE IF NOT EXISTS gates (name text PRIMARY KEY);"

app = App()


def setup(database_url: str, schema: str) -> None:
    setup_tables(database_url, schema, TABLES)


@app.tool("work")
def work(label: str) -> str:
    with connect() as c:
        c.execute("INSERT INTO executions (run_id, what) VALUES (%s, %s)", (current_action().run_id, label))
    return label.upper()


@app.tool("gate", effect="read")
async def gate(name: str) -> bool:
    while True:
        with connect() as c:
            if c.execute("SELECT 1 FROM gates WHERE name = %s", (name,)).fetchone():
                return True
        await asyncio.sleep(0.05)


@app.workflow("summarize")
async def summarize(run: Run, text: str) -> dict[str, Any]:
    return {"summary": await run.call("work", label=text)}


@app.workflow("gated")
async def gated(run: Run, gate: str) -> dict[str, Any]:
    await run.call("gate", name=gate)
    return {"summary": await run.call("work", label=gate)}


@app.workflow("whose")
async def whose(run: Run, depth: int) -> list[str | None]:
    """The tenant as the run sees it, and as each of its descendants does."""
    below: list[str | None] = []
    if depth:
        below = await (await run.start("whose", {"depth": depth - 1})).result()
    return [run.tenant, *below]


@app.workflow("fail", fails_on=(ValueError,))
async def fail(run: Run, why: str) -> None:
    raise ValueError(why)


@app.workflow("echo")
async def echo(run: Run, text: str) -> dict[str, Any]:
    """A child with no tool: a crash anywhere in it leaves nothing in doubt."""
    return {"summary": text.upper()}


@app.workflow("fan_out")
async def fan_out(run: Run, n: int, child: str = "summarize") -> dict[str, Any]:
    children = await asyncio.gather(*(run.start(child, {"text": f"t{i}"}) for i in range(n)))
    results = await asyncio.gather(*(c.result() for c in children))
    return {"ids": [c.id for c in children], "results": results}


@app.workflow("parent")
async def parent(run: Run, gate: str) -> dict[str, Any]:
    child = await run.start("gated", {"gate": gate})
    return {"child": child.id, "result": await child.result()}


@app.workflow("grandparent")
async def grandparent(run: Run, gate: str) -> dict[str, Any]:
    child = await run.start("parent", {"gate": gate})
    return await child.result()  # type: ignore[no-any-return]


@app.workflow("catches")
async def catches(run: Run, why: str) -> dict[str, Any]:
    child = await run.start("fail", {"why": why})
    try:
        await child.result()
    except ChildFailed as exc:
        return {"caught": exc.state, "child": exc.child_id, "reason": exc.reason}
    return {"caught": None}


async def summary(child: Child) -> dict[str, Any]:
    try:
        return await child.result()  # type: ignore[no-any-return]
    except ChildFailed as exc:
        return {"failed": exc.child_id, "state": exc.state}


@app.workflow("mixed")
async def mixed(run: Run, n: int) -> list[dict[str, Any]]:
    """Every third child fails; each failure is caught where its result is awaited."""
    children = await asyncio.gather(
        *(
            run.start("fail" if i % 3 == 2 else "gated", {"why": "x"} if i % 3 == 2 else {"gate": f"g{i}"})
            for i in range(n)
        )
    )
    return await asyncio.gather(*(summary(c) for c in children))


@app.workflow("gather_raises")
async def gather_raises(run: Run, gate: str) -> str:
    """The first child fails while the second is held at its gate: the ``gather`` raises, and
    its sibling wait goes on."""
    children = [await run.start("fail", {"why": "x"}), await run.start("gated", {"gate": gate})]
    try:
        await asyncio.gather(*(c.result() for c in children))
    except ChildFailed:
        return "caught"
    return "not raised"


@app.workflow("lets_fail")
async def lets_fail(run: Run, why: str) -> None:
    await (await run.start("fail", {"why": why})).result()
