"""A payout workflow for the pause tests: a payout that stays in flight until the test creates its
gate file, then an email; each effect counted in the test's `executions` table."""

from __future__ import annotations

import os
import time
from typing import Any

from outlast import App, Run
from tests.apps.basic import record

app = App()


@app.tool("payout")
def payout(order: str, gate: str) -> str:
    record(order, "payout:start")
    give_up = time.monotonic() + 30
    while gate and not os.path.exists(gate) and time.monotonic() < give_up:
        time.sleep(0.05)
    record(order, "payout")
    return "paid"


@app.tool("notify")
def notify(order: str) -> str:
    record(order, "notify")
    return "sent"


@app.workflow("payouts")
async def payouts(run: Run, order: str, gate: str = "") -> dict[str, Any]:
    paid = await run.call(payout, order=order, gate=gate)
    sent = await run.call(notify, order=order)
    return {"order": order, "payout": paid, "notify": sent}
