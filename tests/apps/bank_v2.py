"""Version 2 of tests/apps/bank.py's ``pay``: the same tools, the workflow's code changed.

The run's input chooses how far the change goes: ``variant=""`` keeps the call sequence (only
the code differs), ``"reargued"`` transfers another amount, ``"reordered"`` notifies before it
transfers. A run admitted by version 1 is refused by this program until it is migrated
(``outlast resume RUN --accept-program-change``); replay must still match.
"""

from __future__ import annotations

from typing import Any

from outlast import App
from tests.apps.bank import register_tools

app = App()
register_tools(app)


@app.workflow("pay")
async def pay(run: Any, amount: int, to: str, variant: str = "") -> dict[str, Any]:
    """Version 2 of the payment."""
    before = await run.call("balance", account=to)
    if variant == "reordered":
        sent = await run.call("notify", msg=f"sent {amount} to {to}")
        receipt = await run.call("transfer", amount=amount, to=to)
    else:
        charged = amount + 1 if variant == "reargued" else amount
        receipt = await run.call("transfer", amount=charged, to=to)
        sent = await run.call("notify", msg=f"sent {amount} to {to}")
    after = await run.call("balance", account=to)
    return {"before": before, "receipt": receipt, "sent": sent, "after": after}
