"""Workflows for the metrics and traces tests: ``observed`` calls a tool retried once, a model
tool that charges tokens, a tool that fails (caught), and a plain write last (a gap there is in
doubt); ``nap`` only sleeps (a worker paused during it loses its lease)."""

from __future__ import annotations

import asyncio
from typing import Any

from outlast import App, Retry, current_action

app = App()
_failed_once: set[str] = set()  # idempotency keys whose first dispatch failed (per process)


@app.tool("flaky", effect="read", retry=Retry(attempts=3, wait=0.01, on=(ConnectionError,)))
def flaky(n: int) -> int:
    key = current_action().idempotency_key
    if key not in _failed_once:
        _failed_once.add(key)
        raise ConnectionError("the first dispatch of each operation fails")
    return n


@app.tool("llm", effect="read", kind="model", model="tiny-model")
def llm(prompt: str) -> str:
    current_action().charge(input_tokens=len(prompt.split()), output_tokens=3)
    return "a short answer"


@app.tool("broken", effect="read")
def broken(n: int) -> int:
    raise ValueError(f"broken on {n}")


@app.tool("note")
def note(text: str) -> str:
    return text


@app.workflow("observed")
async def observed(run: Any, n: int = 0) -> dict[str, Any]:
    value = await run.call("flaky", n=n)
    answer = await run.call("llm", prompt="say something short")
    try:
        await run.call("broken", n=n)
    except Exception:
        pass
    await run.call("note", text=f"done {n}")
    return {"value": value, "answer": answer}


@app.workflow("nap")
async def nap(run: Any, seconds: float = 1.0) -> float:
    await asyncio.sleep(seconds)
    return seconds
