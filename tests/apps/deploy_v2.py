"""Version 2 of tests/apps/deploy_v1.py: ``ship`` is another program identity (its executions write
``v2:PID``); ``refund`` rounds up, behind a patch marker, so that a run started by version 1
and migrated here replays version 1's branch."""

from __future__ import annotations

import math
import os
from typing import Any

from outlast import App
from tests.apps.basic import record
from tests.apps.deploy_v1 import register_tools

app = App()
register_tools(app)


@app.workflow("ship", version="2")
async def ship(run: Any, n: int) -> dict[str, Any]:
    record(run.run_id, f"v2:{os.getpid()}")
    await run.call("pack", n=n)
    await run.sleep(0.3)
    await run.call("pack", n=n + 2)
    return {"version": "2", "pid": os.getpid()}


@app.workflow("refund", version="2")
async def refund(run: Any, amount: float, seconds: float) -> dict[str, Any]:
    record(run.run_id, "refund")
    await run.call("pack", n=1)
    if run.patched("fix-refund-rounding"):
        await run.sleep(seconds)
        total, branch = math.ceil(amount), "new"
    else:
        await run.sleep(seconds)
        total, branch = round(amount), "old"
    assert run.patched("fix-refund-rounding") == (branch == "new")  # the same answer again
    await run.call("pack", n=total)
    return {"total": total, "branch": branch}
