"""A bug parks the run instead of failing it: a payment whose workflow raises after the charge
waits (reason workflow_error) holding no worker; the fix is deployed (a new program), the run is
resumed and finishes, its journal replayed: one charge, one email, counted in the world. A failure
the workflow declares still ends the run failed."""

from __future__ import annotations

import pytest

from outlast import Client
from tests.conftest import World, wait_for

pytestmark = pytest.mark.crash
APP = "tests.apps.buggy:app"


def _effects(world: World, order: str) -> list[str]:
    rows = world.sql("SELECT what FROM executions WHERE run_id = %s ORDER BY id", order)
    return [r[0].split(":")[0] for r in rows]


def test_a_bug_after_the_charge_parks_and_the_fix_resumes_with_no_effect_redone(world: World) -> None:
    buggy = world.worker(APP)
    with Client(settings=world.settings()) as c:
        run = c.enqueue("pay", {"order": "o1", "cents": 500}, run_id="o1")
        wait_for(lambda: c.status(run.id).state == "waiting", what="the run to park")
        parked = c.status(run.id)
        assert parked.reason == "workflow_error", parked
        status = world.cli("status", run.id).stdout
        assert "AttributeError" in status and "outlast resume o1" in status, status
        assert _effects(world, "o1") == ["charge"]
        buggy.terminate()
        buggy.wait(10)
        # The fix deployed: another program of `pay`. Its worker would take the run forward by itself
        # (test_moved.py); here it is resumed by hand.
        world.worker(APP, BUGGY_FIXED="1", OUTLAST_MOVE_PARKED="off")
        resumed = world.cli("resume", run.id)
        assert resumed.returncode == 0, resumed.stderr
        done = c.wait(run.id, timeout=30)
    assert done.state == "succeeded", (done.state, done.reason)
    assert _effects(world, "o1") == ["charge", "email"]  # the charge served from the journal
    keys = world.sql("SELECT what FROM executions WHERE run_id = 'o1' AND starts_with(what, 'charge:')")
    assert len(keys) == 1


def test_a_declared_failure_still_fails_the_run(world: World) -> None:
    world.worker(APP)
    with Client(settings=world.settings()) as c:
        run = c.enqueue("pay", {"order": "o2", "cents": 0}, run_id="o2")
        done = c.wait(run.id, timeout=30)
    assert (done.state, done.reason) == ("failed", "order o2: nothing to charge")
    assert _effects(world, "o2") == []


def test_a_parked_run_cancelled_ends_at_once(world: World) -> None:
    world.worker(APP)
    with Client(settings=world.settings()) as c:
        run = c.enqueue("pay", {"order": "o3", "cents": 5}, run_id="o3")
        wait_for(lambda: c.status(run.id).reason == "workflow_error", what="the run to park")
        assert c.cancel(run.id).state == "cancelled"
