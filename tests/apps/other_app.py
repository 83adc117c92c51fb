"""A second app, sharing the `default` queue with ``tests.apps.basic`` (whose workers do not know
its workflow): a payment whose charge is counted in the test's `executions` table."""

from __future__ import annotations

from typing import Any

from outlast import App, Run, current_action
from tests.apps.basic import record

app = App()


@app.tool("charge", idempotent=True)
def charge(order: str) -> str:
    record(order, f"charge:{current_action().idempotency_key}")
    return f"charged {order}"


@app.workflow("pay_other")
async def pay_other(run: Run, order: str) -> dict[str, Any]:
    return {"receipt": await run.call(charge, order=order)}
