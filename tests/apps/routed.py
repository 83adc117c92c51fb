"""An app whose payouts run on a queue of their own (``@app.workflow(queue="payouts")``): a payout's
charge is counted in the test's `executions` table; ``payday`` (on the default queue) starts payouts
as child runs."""

from __future__ import annotations

import asyncio
from typing import Any

from outlast import App, Run, current_action
from tests.apps.basic import record

app = App()


@app.tool("charge_payout", idempotent=True)
def charge_payout(order: str) -> str:
    record(order, f"charge:{current_action().idempotency_key}")
    return f"paid {order}"


@app.workflow("payout", queue="payouts")
async def payout(run: Run, order: str) -> dict[str, Any]:
    return {"receipt": await run.call(charge_payout, order=order)}


@app.workflow("payday")
async def payday(run: Run, orders: list[str]) -> list[str]:
    children = await asyncio.gather(*(run.start("payout", {"order": o}) for o in orders))
    await asyncio.gather(*(c.result() for c in children))
    return [c.id for c in children]
