"""One clock for claims, leases and due times (migration 0018_clock): ``outlast_now()``, the
database clock plus the schema's offset. ``advance()`` moves the offset only: a week-long sleep and
a two-day approval expiry pass at once, ``run.now()`` moves with them, and nothing stored is
rewritten (the journal's entries and hashes, the timer's due time among them, are as written)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

import psycopg

from outlast import App, ApprovalExpired, Run
from outlast.testing import HarnessFactory
from tests.conftest import World

DAY = 24 * 3600


def trial_app() -> App:
    app = App()

    @app.workflow("trial")
    async def trial(run: Run, customer: str) -> dict[str, Any]:
        started = await run.now()
        await run.sleep(7 * DAY)  # a week's free trial
        try:
            await run.approval("extend", {"customer": customer}, approvers=["sales"], expires_in=2 * DAY)
            extended = True
        except ApprovalExpired:
            extended = False
        ended = await run.now()
        return {"started": started.isoformat(), "ended": ended.isoformat(), "extended": extended}

    return app


def stored(h: Any, run_id: str) -> list[tuple[Any, ...]]:
    return h.sql("SELECT seq, kind, body, hash FROM journal WHERE run_id = %s ORDER BY seq", run_id)


def test_a_week_long_sleep_and_a_two_day_expiry_pass_on_advance(outlast_harness: HarnessFactory) -> None:
    h = outlast_harness(trial_app())
    h.start_worker()
    run = h.client.enqueue("trial", {"customer": "ada"})
    asleep = h.wait(run.id, "waiting")
    assert asleep.reason == "timer"
    before = stored(h, run.id)
    assert [r[1] for r in before] == ["value", "timer"]

    assert h.advance(7 * DAY) == [run.id]
    h.wait(run.id, "awaiting_approval", timeout=10)
    [request] = h.client.approvals(run.id)
    assert request["status"] == "pending"
    h.advance(2 * DAY)
    done = h.wait(run.id, timeout=10)

    assert done.state == "succeeded", done
    assert done.result["extended"] is False  # nobody decided within the two days
    elapsed = datetime.fromisoformat(done.result["ended"]) - datetime.fromisoformat(done.result["started"])
    assert timedelta(days=9) <= elapsed < timedelta(days=9, minutes=5)  # run.now() moved with the clock
    # Nothing written before the advances was rewritten: same entries, same hashes; the chain verifies.
    assert stored(h, run.id)[: len(before)] == before
    assert h.client.verify(run.id) is None
    timer = json.loads(before[1][2])  # the timer's due time, as written: a week after the start
    started = datetime.fromisoformat(done.result["started"])
    assert datetime.fromisoformat(timer["until"]) - started >= timedelta(days=7)
    assert [e["detail"]["seconds"] for e in h.events(run.id) if e["kind"] == "advanced"] == [7 * DAY, 2 * DAY]


def test_the_offset_is_the_schemas_own(outlast_harness: HarnessFactory, world: World) -> None:
    """Every connection to the harness's schema reads the moved clock; another schema's does not."""
    h = outlast_harness(App())
    h.advance(DAY)
    [(shift,)] = h.sql("SELECT (SELECT at FROM outlast_now()) - now()")
    assert shift == timedelta(days=1)
    with psycopg.connect(world.database_url, options=f"-c search_path={world.schema}") as c:
        row = c.execute(b"SELECT (SELECT at FROM outlast_now()) - now()").fetchone()
    assert row is not None and row[0] == timedelta(0)
