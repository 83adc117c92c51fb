"""A payment whose workflow has a bug after the charge (``buggy_fixed`` is the same workflow with the
bug fixed, as deployed after it; that fix also sends the email of an order named ``late...``
before its charge, so that a run of one parked before the fix diverges from its journal): each
effect counted in the test's `executions` table, keyed by its operation's idempotency key."""

from __future__ import annotations

import os
from typing import Any

from outlast import App, Failure, Run, current_action
from tests.apps.basic import record

app = App()
FIXED = os.environ.get("BUGGY_FIXED") == "1"  # the deploy of the fix: another program of `pay`


@app.tool("charge", idempotent=True)
def charge(order: str, cents: int) -> dict[str, Any]:
    record(order, f"charge:{current_action().idempotency_key}")
    return {"order": order, "cents": cents}


@app.tool("email")
def email(order: str) -> str:
    record(order, f"email:{current_action().idempotency_key}")
    return "sent"


@app.workflow("pay", version="2" if FIXED else "1")  # the source reads FIXED: the version differs
async def pay(run: Run, order: str, cents: int) -> dict[str, Any]:
    if cents <= 0:
        raise Failure(f"order {order}: nothing to charge")
    if FIXED and order.startswith("late"):  # the fix also moved the email first for these: a divergence
        await run.call(email, order=order)
    receipt = await run.call(charge, order=order, cents=cents)
    if not FIXED:
        receipt["cents"] = receipt.cents_total  # type: ignore[attr-defined]  # the bug: a dict has none
    await run.call(email, order=order)
    return receipt
