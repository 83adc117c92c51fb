"""Version 1 of the ``ship`` workflow, for the rolling-deploy test (version 2 is
tests/apps/deploy_v2.py: the same tools, other workflow code, so another program identity).
Every execution of a workflow body writes ``v1:PID`` to the test's ``executions`` table."""

from __future__ import annotations

import os
import time
from typing import Any

from outlast import App
from tests.apps.basic import record

app = App()


def register_tools(app: App) -> None:
    @app.tool("pack", effect="read")
    def pack(n: int) -> int:
        time.sleep(0.01)
        return n


register_tools(app)


@app.workflow("ship", version="1")
async def ship(run: Any, n: int) -> dict[str, Any]:
    record(run.run_id, f"v1:{os.getpid()}")
    await run.call("pack", n=n)
    await run.sleep(0.3)  # woken by a stream entry any worker may read
    await run.call("pack", n=n + 1)
    return {"version": "1", "pid": os.getpid()}


@app.workflow("refund", version="1")
async def refund(run: Any, amount: float, seconds: float) -> dict[str, Any]:
    await run.call("pack", n=1)
    await run.sleep(seconds)
    total = round(amount)
    await run.call("pack", n=total)
    return {"total": total, "branch": "old"}
