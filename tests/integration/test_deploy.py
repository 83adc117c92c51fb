"""Rolling deploys: old and new worker processes side by side. A run goes only to a worker that
serves its program (the others hand it back to the queue), and waits ``program_changed`` only
when no live worker serves it."""

from __future__ import annotations

import signal
import time

from outlast import Client
from tests.apps import deploy_v1, deploy_v2
from tests.conftest import World, wait_for

V1 = "tests.apps.deploy_v1:app"
V2 = "tests.apps.deploy_v2:app"


def finished(world: World, version: str) -> int:
    return world.sql(
        "SELECT count(*) FROM runs WHERE state = 'succeeded' AND program LIKE %s", f"{version}:%"
    )[0][0]


def test_a_deploy_in_the_middle_of_200_runs_parks_nothing(world: World) -> None:
    old = [world.worker(V1, "-c", "4") for _ in range(2)]
    with Client(settings=world.settings(), app=deploy_v1.app) as c1:
        first = [c1.enqueue("ship", {"n": i}).id for i in range(100)]
        wait_for(lambda: finished(world, "1") >= 15, timeout=60, what="the old workers to get going")
        # The deploy: new workers come while most old runs are still to do (queued, running,
        # sleeping); new runs are admitted by the new program.
        new = [world.worker(V2, "-c", "8") for _ in range(2)]
        # New runs come once the new workers are up (their heartbeat records exist): before that,
        # no live worker serves the new program and an old worker rightly parks a new run.
        live_v2 = "SELECT count(*) FROM workers WHERE programs->>'ship' LIKE '2:%%'"
        wait_for(lambda: world.sql(live_v2)[0][0] >= 2, timeout=60, what="the new workers' heartbeats")
        with Client(settings=world.settings(), app=deploy_v2.app) as c2:
            second = [c2.enqueue("ship", {"n": i}).id for i in range(100)]
            time.sleep(1.0)
            old[0].send_signal(signal.SIGTERM)  # one old worker leaves: its runs are handed over
            assert old[0].wait(30) == 0
            for rid in first:
                assert c1.wait(rid, timeout=120).state == "succeeded"
            old[1].send_signal(signal.SIGTERM)  # the last old worker leaves once its runs are done
            assert old[1].wait(30) == 0
            for rid in second:
                assert c2.wait(rid, timeout=120).state == "succeeded"
    assert all(p.poll() is None for p in new)

    # Nothing parked, nothing refused: no run ever waited for another program.
    waits = "SELECT run_id, detail FROM events WHERE kind = 'waiting' AND detail->>'reason' <> 'timer'"
    parked = world.sql(waits)
    assert parked == []
    # Every execution of every run was by a worker serving its program, and each ran to the end.
    runs = dict(world.sql("SELECT id, split_part(program, ':', 1) FROM runs"))
    assert sorted(runs.values()) == ["1"] * 100 + ["2"] * 100
    by_run: dict[str, set[str]] = {}
    for rid, what in world.sql("SELECT run_id, what FROM executions"):
        by_run.setdefault(rid, set()).add(what.split(":")[0])
    assert {rid: versions for rid, versions in by_run.items() if versions != {"v" + runs[rid]}} == {}
    assert len(by_run) == 200
    results = dict(world.sql("SELECT id, result->>'version' FROM runs"))
    assert results == runs


def test_a_patch_marker_keeps_old_runs_on_the_old_branch(world: World) -> None:
    with Client(settings=world.settings()) as c:
        old_worker = world.worker(V1)
        old = c.enqueue("refund", {"amount": 2.5, "seconds": 3}).id
        wait_for(lambda: c.status(old).reason == "timer", timeout=30, what="the old run to sleep")
        old_worker.send_signal(signal.SIGTERM)
        assert old_worker.wait(30) == 0
        world.worker(V2, OUTLAST_MOVE_PARKED="off")  # the old run is moved by hand, below
        # No live worker serves version 1: once its timer is due, the old run waits for one.
        wait_for(lambda: c.status(old).reason == "program_changed", timeout=30, what="the old run to park")
        moved = world.cli("resume", old, "--accept-program-change")
        assert moved.returncode == 0, moved.stderr
        done = c.wait(old, timeout=30)
        assert (done.state, done.result) == ("succeeded", {"total": 2, "branch": "old"}), done.error

        new = c.enqueue("refund", {"amount": 2.5, "seconds": 0.5}).id
        done = c.wait(new, timeout=30)
        assert (done.state, done.result) == ("succeeded", {"total": 3, "branch": "new"}), done.error
    # The new run took the patch once, journaled it, and replayed it after its sleep (a read
    # journals its result only).
    journal = world.sql("SELECT kind, op_id FROM journal WHERE run_id = %s ORDER BY seq", new)
    assert [k for k, _ in journal] == ["result", "patch", "timer", "result"]
    assert [op for _, op in journal] == ["op-1", "op-2", "op-3", "op-4"]
    assert world.sql("SELECT count(*) FROM executions WHERE run_id = %s", new) == [(2,)]
    assert world.sql("SELECT count(*) FROM journal WHERE run_id = %s AND kind = 'patch'", old) == [(0,)]


def test_a_run_is_handed_back_for_program_grace_after_its_last_worker_left(world: World) -> None:
    old = world.worker(V1)
    wait_for(lambda: world.sql("SELECT count(*) FROM served_programs")[0][0], what="the old worker's beat")
    old.send_signal(signal.SIGTERM)  # a clean stop: its heartbeat record goes, its program is remembered
    assert old.wait(30) == 0
    world.worker(V2, OUTLAST_PROGRAM_GRACE="5", OUTLAST_MOVE_PARKED="off")
    wait_for(lambda: world.sql("SELECT count(*) FROM workers")[0][0], what="the new worker's beat")
    with Client(settings=world.settings(), app=deploy_v1.app) as c:
        rid = c.enqueue("ship", {"n": 1}).id
        start = time.monotonic()
        wait_for(lambda: c.status(rid).reason == "program_changed", timeout=30, what="the run to park")
        waited = time.monotonic() - start
        # Handed back (still queued) until five seconds after the old worker's last beat, then parked.
        assert 1.5 <= waited <= 12.0, waited
        back = world.worker(V1)  # an old worker comes back: the sweeper re-publishes the run to it
        done = c.wait(rid, timeout=30)
        assert done.state == "succeeded" and done.result == {"version": "1", "pid": back.pid}
