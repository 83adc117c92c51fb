"""Scheduled workflows for tests/integration/test_time.py; each run writes one `executions` row.

``app``: a tick every second, every tick enqueued (catch_up="all"). ``catchup``: three hourly
schedules, one per catch_up, at a minute half an hour away from the import's, so that their
latest tick is always about 30 minutes old (missed, for catch_up="none")."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from outlast import App
from outlast._schedules import CATCH_UPS
from tests.apps.basic import record

app = App()


@app.schedule("* * * * * *", name="every-second", catch_up="all", input={"from": "schedule"})
@app.workflow("tick")
async def tick(run: Any, **input: Any) -> dict[str, Any]:
    record(run.run_id, "tick")
    return input


catchup = App()
MINUTE = (datetime.now(UTC).minute + 30) % 60


@catchup.workflow("hourly")
async def hourly(run: Any) -> None:
    record(run.run_id, "hourly")


for how in CATCH_UPS:
    catchup.schedule(f"{MINUTE} * * * *", name=f"hourly-{how}", workflow="hourly", catch_up=how)
