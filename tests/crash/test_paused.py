"""An operator's pause: a payout in flight when the pause comes finishes, once, and is journaled; the
run stops at its next crossing, holding no worker or lease (a worker killed and replaced leaves it
parked); unpaused, it goes on and finishes. A paused workflow's new runs are admitted and do not
start. Effects counted in the world."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from outlast import Client
from tests.conftest import World, wait_for

pytestmark = pytest.mark.crash
APP = "tests.apps.payouts:app"


def _effects(world: World, order: str) -> list[str]:
    return [r[0] for r in world.sql("SELECT what FROM executions WHERE run_id = %s ORDER BY id", order)]


def _held(world: World, run_id: str) -> tuple[str, str | None, str | None, object]:
    return world.sql("SELECT state, reason, owner, lease_expires_at FROM runs WHERE id = %s", run_id)[0]


def test_a_pause_with_a_payout_in_flight_stops_the_run_at_its_next_crossing(
    world: World, tmp_path: Path
) -> None:
    gate = tmp_path / "open"
    worker = world.worker(APP)
    with Client(settings=world.settings()) as c:
        c.enqueue("payouts", {"order": "p1", "gate": str(gate)}, run_id="p1")
        wait_for(lambda: _effects(world, "p1") == ["payout:start"], what="the payout to be in flight")
        paused = world.cli("pause", "p1", "--why", "incident 7: stop all payouts")
        assert paused.returncode == 0, paused.stderr
        time.sleep(1.5)  # two heartbeats (a 2 s lease) pass while the payout is in flight
        gate.touch()
        wait_for(lambda: _held(world, "p1")[0] == "waiting", what="the run to stop")
        assert _held(world, "p1") == ("waiting", "paused", None, None)  # no worker, no lease
        assert _effects(world, "p1") == ["payout:start", "payout"]  # the email never started
        results = [e for e in c.journal("p1") if e.kind == "result"]
        assert [e.op_id for e in results] == ["op-1"]  # the payout's result journaled
        status = world.cli("status", "p1").stdout
        assert "paused" in status and "incident 7: stop all payouts" in status, status
        assert "outlast unpause p1" in status, status
        worker.kill()  # the run holds nothing: a worker killed and another started leave it parked
        worker.wait(10)
        world.worker(APP)
        time.sleep(3)
        assert _held(world, "p1")[:2] == ("waiting", "paused")
        resumed = world.cli("resume", "p1")  # a resume would only park it again: refused, saying why
        assert resumed.returncode != 0 and "outlast unpause p1" in resumed.stderr, resumed.stderr
        assert _held(world, "p1")[:2] == ("waiting", "paused")
        unpaused = world.cli("unpause", "p1")
        assert unpaused.returncode == 0 and "p1" in unpaused.stdout, unpaused.stderr
        done = c.wait("p1", timeout=30)
    assert done.state == "succeeded", (done.state, done.reason)
    assert _effects(world, "p1") == ["payout:start", "payout", "notify"]  # the payout once


def test_a_paused_workflow_admits_new_runs_and_starts_none(world: World) -> None:
    world.worker(APP)
    with Client(settings=world.settings()) as c:
        c.pause(workflow="payouts", why="audit")
        run = c.enqueue("payouts", {"order": "p2"}, run_id="p2")
        assert run.state == "queued"  # admitted
        wait_for(lambda: _held(world, "p2")[:2] == ("waiting", "paused"), what="the new run to wait")
        assert _effects(world, "p2") == []  # it did not start
        assert [p["target"] for p in c.pause_of("p2")] == ["payouts"]
        with pytest.raises(Exception, match="no pause of run 'p2'"):
            c.unpause("p2")  # its workflow's pause holds it, not one of its own
        assert c.unpause(workflow="payouts") == ["p2"]
        done = c.wait("p2", timeout=30)
        kinds = [e["kind"] for e in c.events("p2")]
    assert done.state == "succeeded"
    assert _effects(world, "p2") == ["payout:start", "payout", "notify"]
    assert "paused" in kinds and "unpaused" in kinds, kinds
