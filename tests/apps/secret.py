"""Tools with a secret argument (tests/integration/test_secrets.py, test_secrets_canary.py). The
secret is never in the run's input: the workflow reads it from its process's environment
(``SECRET_API_KEY``), as it would from a vault client, and passes it to the tools, which record in
the test's ``executions`` table only *whether* they were given the right value (never the value).
"""

from __future__ import annotations

import json
import os
from typing import Any

from outlast import App, Run, ToolError, current_action
from tests.apps.basic import record

app = App()


def _given(api_key: str) -> str:
    return "right key" if api_key == os.environ["SECRET_API_KEY"] else "wrong key"


@app.tool("lookup", effect="read", secret=["api_key"])
def lookup(api_key: str, who: str) -> str:
    return f"{who}: {_given(api_key)}"


@app.tool("refuse", secret=["api_key"])
def refuse(api_key: str) -> None:
    raise PermissionError(f"the service refused key {api_key} (and said so)")


@app.tool("pay", idempotent=True, secret=["api_key"])
def pay(api_key: str, amount: int, run_id: str) -> dict[str, Any]:
    record(run_id, f"pay {amount}: {_given(api_key)}")
    return {"paid": amount, "with": _given(api_key)}


@app.tool("echo", effect="read", secret=["api_key"])
def echo(api_key: str) -> str:
    return f"the service echoed {api_key}"


@app.tool("dump", effect="read", secret=["api_key"])
def dump(api_key: str) -> str:
    """Returns its key as JSON text would write it, escaped, and as ``ascii`` would."""
    return f"{json.dumps({'key': api_key})} {json.dumps({'key': api_key}, ensure_ascii=False)} {api_key!a}"


@app.tool("complain", secret=["api_key"])
def complain(api_key: str) -> None:
    raise ValueError(f"bad key {api_key!r}")


async def _refused(run: Run, tool: Any, key: str) -> str:
    try:
        await run.call(tool, api_key=key)
    except ToolError as exc:
        return exc.message
    return ""


@app.workflow("leaky", fails_on=(RuntimeError,))
async def leaky(run: Run, fail: bool) -> dict[str, Any]:
    """Every careless way a workflow has to let its secret out: a tool that returns it (as is, or
    escaped in JSON text), a tool error that quotes it (as is, or its ``repr``), an exception that
    quotes it, a result that holds it."""
    key = os.environ["SECRET_API_KEY"]
    echoed = await run.call(echo, api_key=key)
    dumped = await run.call(dump, api_key=key)
    refused = await _refused(run, refuse, key)
    complained = await _refused(run, complain, key)
    if fail:
        raise RuntimeError(f"the workflow gave up with key {key} ({key!r})")
    return {"echoed": echoed, "dumped": dumped, "refused": refused, "complained": complained, "key": key}


@app.workflow("charge")
async def charge(run: Run, who: str, amount: int) -> dict[str, Any]:
    key = os.environ["SECRET_API_KEY"]  # a reference resolved here, never a value in the input
    seen = await run.call(lookup, api_key=key, who=who)
    try:
        await run.call(refuse, api_key=key)
        refused = ""
    except ToolError as exc:
        refused = exc.message
    paid = await run.call(pay, api_key=key, amount=amount, run_id=run.id)
    return {"seen": seen, "refused": refused, "paid": paid}


@app.workflow("approved_charge")
async def approved_charge(run: Run, amount: int) -> dict[str, Any]:
    key = os.environ["SECRET_API_KEY"]
    asked = {"api_key": key, "amount": amount, "run_id": run.id}  # the call of `pay`, whole
    decision = await run.approval("pay", asked, approvers=["ann"])
    args = decision.args
    return await run.call(pay, api_key=args["api_key"], amount=args["amount"], run_id=run.id)


@app.tool("speak", effect="read", secret=["api_key"])
def speak(api_key: str) -> str:
    """Streams its key as is and inside JSON, as a careless tool would while it works."""
    current_action().stream(f"calling with {api_key}")
    current_action().stream({"key": api_key, "note": f"Bearer {api_key}"})
    return "spoken"


@app.tool("ask_model")
def ask_model(prompt: str, url: str) -> int:
    """No secret argument: a known key passed in its arguments (a prompt, a URL) is journaled masked."""
    return len(prompt) + len(url)


@app.workflow("streams_key")
async def streams_key(run: Run) -> str:
    key = os.environ["SECRET_API_KEY"]
    spoken = await run.call(speak, api_key=key)
    run.stream(f"the workflow streams {key}")
    await run.call(ask_model, prompt=f"use the key {key} to answer", url=f"https://x.test/?k={key}")
    return spoken
