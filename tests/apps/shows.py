"""Workflows that show what they do: state set, custom events emitted, chunks streamed
(tests/integration/test_shown.py, tests/crash/test_shown_crash.py). ``note`` records each
dispatch in ``executions``, so a test counts what really ran."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from outlast import App, Run, current_action
from tests.apps import connect

app = App()


@app.tool("note", idempotent=True)
def note(what: str) -> str:
    with connect() as c:
        c.execute("INSERT INTO executions (run_id, what) VALUES (%s, %s)", (current_action().run_id, what))
    return what


@app.tool("tokens", effect="read")
async def tokens(n: int) -> str:
    action = current_action()
    for i in range(n):
        action.stream(f"t{i}")
    return "said"


@app.tool("sync_tokens", effect="read")
def sync_tokens(n: int) -> str:
    action = current_action()
    for i in range(n):
        action.stream({"i": i})
    return "said"


@app.workflow("progress")
async def progress(
    run: Run, steps: int = 3, pause: float = 0.0, nap: float = 0.0, emit: bool = True
) -> dict[str, Any]:
    """For each step: state ``step`` set, the event ``custom:step`` emitted, a tool called; then
    a pause in the workflow (``pause``) or a durable sleep (``nap``: the run is replayed after).
    ``emit=False``: no event at all while it runs (a state change alone must wake a reader)."""
    for i in range(steps):
        await run.set_state("step", i)
        if emit:
            await run.emit("step", {"i": i})
        await run.call("note", f"step-{i}")
        if pause:
            await asyncio.sleep(pause)
        if nap:
            await run.sleep(nap)
    await run.set_state("done", True)
    return {"steps": steps}


@app.workflow("talk")
async def talk(run: Run, n: int = 5, wait_for: str = "", hold: str = "") -> str:
    """Streams ``n`` chunks from the workflow, then from an async tool and a sync one. ``wait_for``
    and ``hold``: files whose presence lets the workflow go on, before it streams (a reader
    connects first) and after its own chunks (a reader sees them while it runs)."""
    while wait_for and not os.path.exists(wait_for):
        await asyncio.sleep(0.02)
    for i in range(n):
        run.stream(f"w{i}")
    while hold and not os.path.exists(hold):
        await asyncio.sleep(0.02)
    await run.call("tokens", n)
    await run.call("sync_tokens", n)
    return "over"


@app.workflow("quiet")
async def quiet(run: Run) -> str:
    await run.call("note", "quiet")
    return "over"


@app.workflow("refused")
async def refused(run: Run, what: str) -> str:
    if what == "kind":
        await run.emit("a:b", {})
    elif what == "key":
        await run.set_state("", 1)
    elif what == "value":
        await run.set_state("k", float("nan"))
    else:
        run.stream("x" * (64 * 1024 + 1))
    return "shown"


# What a sender or a prompt-injected model may make a run show: an OSC 52 (write the clipboard) and
# an OSC 0 (retitle the window), a clear screen, a carriage return that hides what came before, an
# 8-bit CSI, a right-to-left override.
HOSTILE = "\x1b]52;c;aGk=\x07\x1b]0;pwned\x07\x1b[2J\r\x9b31m\u202e"


@app.workflow("hostile")
async def hostile(run: Run) -> str:
    await run.set_state(f"key{HOSTILE}", f"value{HOSTILE}")
    run.stream(f"chunk{HOSTILE}\nnext line\n")
    run.stream({"said": HOSTILE})
    answer: str = await run.request(f"ask{HOSTILE}", {"about": HOSTILE}, response=str, responders=["ops"])
    return f"{answer}{HOSTILE}"
