"""Parked runs move to new code in bulk, safely: a worker of the fixed program takes forward, by
itself, the runs a bug parked on the old one where replay agrees with the journal, and leaves the
one that diverges waiting with its divergence shown; ``outlast resume --workflow`` tries them again
and says what moved and what did not. Real worker processes; charges and emails counted in the
world."""

from __future__ import annotations

import time

import pytest

from outlast import Client
from tests.conftest import World, wait_for

pytestmark = pytest.mark.crash
APP = "tests.apps.buggy:app"


def _effects(world: World, order: str) -> list[str]:
    rows = world.sql("SELECT what FROM executions WHERE run_id = %s ORDER BY id", order)
    return [r[0].split(":")[0] for r in rows]


def test_a_fixed_worker_moves_the_parked_runs_that_agree_and_leaves_the_one_that_diverges(
    world: World,
) -> None:
    buggy = world.worker(APP)
    with Client(settings=world.settings()) as c:
        for order in ("o1", "o2", "late1"):
            c.enqueue("pay", {"order": order, "cents": 500}, run_id=order)
        for order in ("o1", "o2", "late1"):
            wait_for(lambda o=order: c.status(o).reason == "workflow_error", what=f"{order} to park")
        time.sleep(2)  # sweeps of the buggy worker: its own parked runs are not its to move
        assert not world.logged("run.moved")
        buggy.terminate()
        buggy.wait(10)
        world.worker(APP, BUGGY_FIXED="1")  # the fix deployed: no operator resumes anything
        done = [c.wait(o, timeout=60) for o in ("o1", "o2")]
        assert [r.state for r in done] == ["succeeded", "succeeded"], [(r.state, r.reason) for r in done]
        late = wait_for(
            lambda: (r := c.status("late1")).reason == "resume_impossible" and r,
            60,
            what="late1 to wait after its replay diverged",
        )
        assert late.state == "waiting", late
        status = world.cli("status", "late1").stdout
        assert "email" in status and "charge" in status, status  # where the replay diverged
        moved = sorted(e["run_id"] for e in world.logged("run.moved"))
        assert moved == ["late1", "o1", "o2"], moved
        bulk = world.cli("resume", "--workflow", "pay", "--wait", "30")
        assert bulk.returncode == 0, bulk.stderr
        assert "1 parked run(s) of pay resumed" in bulk.stdout, bulk.stdout
        assert "stayed: late1 waiting (resume_impossible): " in bulk.stdout, bulk.stdout
    assert _effects(world, "o1") == ["charge", "email"]  # the charge served from the journal
    assert _effects(world, "o2") == ["charge", "email"]
    assert _effects(world, "late1") == ["charge"]  # diverged: nothing redone, nothing new sent


def test_a_bulk_resume_says_what_moved(world: World) -> None:
    buggy = world.worker(APP)
    with Client(settings=world.settings()) as c:
        c.enqueue("pay", {"order": "o3", "cents": 500}, run_id="o3")
        wait_for(lambda: c.status("o3").reason == "workflow_error", what="o3 to park")
        nothing = world.cli("resume", "--workflow", "refund")
        assert "0 parked run(s) of refund resumed" in nothing.stdout, nothing.stdout
        both = world.cli("resume", "o3", "--workflow", "pay")
        assert both.returncode == 2 and "one of them" in both.stderr, both.stderr
        buggy.terminate()
        buggy.wait(10)
        bulk = world.cli("resume", "--workflow", "pay", "--wait", "2")  # no worker yet
        assert "not taken yet: o3 queued" in bulk.stdout, bulk.stdout
        world.worker(APP, BUGGY_FIXED="1")
        assert c.wait("o3", timeout=60).state == "succeeded"
    assert _effects(world, "o3") == ["charge", "email"]
