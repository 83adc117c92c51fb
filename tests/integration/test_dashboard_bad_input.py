"""Input anyone signed in (or anyone holding a callback's URL) can send is refused with a 400 that
says why, never a server error, through ``outlast dashboard`` (uvicorn, in a process of its own): a
callback body nested 100,000 levels deep, a live-output stream's ``Last-Event-ID`` that is no chunk
id, an answer, a result or a batch's count holding a number of 5,000 digits. The run is left as
it was."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx2 as httpx

from outlast._callbacks import sign
from tests.conftest import World
from tests.dashboard import dashboard_process, desk
from tests.integration.test_dashboard_security import bearer, sign_in

KEY = "bI5n-Qx7Tk2Wr9Lz0Mv4Hc8Gp1Fs6Dy3Ja"  # OUTLAST_SECRET_KEY
HUGE = "1" * 5000  # digits: past Python's limit for reading an integer


def test_hostile_input_is_a_400_saying_why(world: World) -> None:
    with desk(world) as d:
        run = d.client.enqueue("refund", {"order": "A-17"})  # asks oncall (olga) for an answer
        d.reach(run.id, "waiting")
        base = dashboard_process(world, OUTLAST_USERS=d.settings.users or "", OUTLAST_SECRET_KEY=KEY)
        with httpx.Client(base_url=base, timeout=20) as http:
            token = sign(KEY, run.id, "paid", datetime.now(UTC) + timedelta(hours=1))
            json_body = {"content-type": "application/json"}
            deep = http.post(f"/callbacks/{token}", content=b"[" * 100_000, headers=json_body)
            assert deep.status_code == 400 and "nested too deep" in deep.json()["error"], deep.text

            for bad in ["abc", "-1", "+", "1-2-3", "1-", "$", "1" * 25, str(1 << 64)]:
                got = http.get(f"/api/runs/{run.id}/stream", headers={**bearer(d.bob), "Last-Event-ID": bad})
                assert got.status_code == 400, (bad, got.status_code, got.text)
                assert "Last-Event-ID" in got.json()["error"]
            after = http.get(f"/api/runs/{run.id}/stream?after=abc", headers=bearer(d.bob))
            assert after.status_code == 400 and "a chunk's id" in after.json()["error"]

            result = {"executed": True, "comment": "checked", "result": HUGE}
            resolved = http.post(f"/api/runs/{run.id}/resolve/op-1", json=result, headers=bearer(d.alice))
            assert resolved.status_code == 400, resolved.text
            assert "the result holds a number of too many digits" in resolved.json()["error"]

            [req] = http.get(f"/api/runs/{run.id}/requests", headers=bearer(d.bob)).json()
            csrf = sign_in(http, d.olga)  # type: ignore[arg-type]
            form = {"csrf": csrf, "answer_json": HUGE}
            posted = http.post(f"/runs/{run.id}/respond/{req['id']}", data=form)
            assert posted.status_code == 400 and "the answer holds a number of too many digits" in posted.text
            batch = http.post("/batch/cancel", data={"csrf": csrf, "count": HUGE, "digest": "d"})
            assert batch.status_code == 400 and "a whole number of runs" in batch.text, batch.text
        assert d.client.status(run.id).state == "waiting"
        assert world.sql("SELECT count(*) FROM messages WHERE run_id = %s", run.id) == [(0,)]
