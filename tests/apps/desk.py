"""The app behind the dashboard's tests (tests/integration/test_dashboard_*.py): a post that
people must approve through the dashboard or the API (``authenticated=True``), and a charge whose
tool times out, so the operation is in doubt until a person resolves it."""

from __future__ import annotations

import time
from typing import Any

from pydantic import BaseModel, Field

from outlast import App

app = App()


@app.tool("publish")
def publish(text: str) -> dict[str, Any]:
    time.sleep(1.5)  # long enough for a page to show the run going on, then finishing
    return {"published": text}


@app.tool("charge", timeout=0.3)
def charge(amount: int) -> dict[str, Any]:
    """Too slow for its timeout: nobody can tell whether it charged (not idempotent, no reconciler)."""
    time.sleep(2.0)
    return {"charged": amount}


@app.workflow("post")
async def post(run: Any, text: str) -> dict[str, Any]:
    """Publish ``text`` once someone of ``ops`` approved it (a revision is asked again)."""
    args = {"text": text}
    while True:
        d = await run.approval("publish", args, approvers=["ops"], authenticated=True)
        if d.status == "approved":
            break
        args = d.args
    return await run.call("publish", **args)


@app.workflow("bill")
async def bill(run: Any, amount: int) -> dict[str, Any]:
    """Charge ``amount``; when the charge is in doubt the run waits for a person's resolution."""
    return {"charge": await run.call("charge", amount=amount)}


_tries: dict[str, int] = {}


@app.tool("fetch", effect="read")
def fetch(key: str) -> dict[str, Any]:
    """Fails its first call for a key (the connection dropped), answers the next."""
    _tries[key] = _tries.get(key, 0) + 1
    if _tries[key] == 1:
        raise ConnectionError(f"connection to {key} dropped")
    return {"key": key}


@app.workflow("tour")
async def tour(run: Any, text: str) -> dict[str, Any]:
    """A retried read, an approval, then a child run: what the run page's timeline draws."""
    try:
        got = await run.call("fetch", key=text)
    except Exception:
        got = await run.call("fetch", key=text)
    await run.approval("publish", {"text": text}, approvers=["ops"], authenticated=True)
    kid = await (await run.start("kid", {"text": text})).result()
    return {"got": got, "kid": kid}


@app.workflow("kid")
async def kid(run: Any, text: str) -> dict[str, Any]:
    return {"kid": text}


class Refund(BaseModel):
    """The answer ``refund`` asks the on-call operators for."""

    amount: int = Field(ge=0)
    reason: str


@app.workflow("refund")
async def refund(run: Any, order: str) -> dict[str, Any]:
    """Ask someone of ``oncall`` how much of ``order`` to refund (a typed request)."""
    answer = await run.request("refund", {"order": order}, response=Refund, responders=["oncall"])
    return {"order": order, "amount": answer.amount, "reason": answer.reason, "type": type(answer).__name__}
