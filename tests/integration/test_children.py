"""Child runs and tenants, with real worker processes on real Postgres and Redis: children counted
per parent in the world (their rows, and ``executions``, one row per dispatch of ``work``), a
parent killed while it starts or waits for a child, cancellation down the tree, a child's failure
caught in its parent, and a tenant kept through continuations and children (tests/apps/family.py)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from outlast import Client, InvalidInput
from outlast._model import RunRecord
from tests.apps import family
from tests.conftest import World, wait_for
from tests.crash import killed

APP = "tests.apps.family:app"


@contextmanager
def family_world(world: World) -> Iterator[Client]:
    family.setup(world.database_url, world.schema)
    client = Client(settings=world.settings())
    try:
        yield client
    finally:
        client.close()


def reach(
    c: Client, run_id: str, *states: str, reason: str | None = None, timeout: float = 30.0
) -> RunRecord:
    def look() -> RunRecord | None:
        if run_id not in {r.id for r in c.runs(limit=1000)}:
            return None  # not started yet
        run = c.status(run_id)
        return run if run.state in states and (reason is None or run.reason == reason) else None

    found: RunRecord = wait_for(look, timeout, 0.1, f"run {run_id} to be {' or '.join(states)}")
    return found


def children(world: World, parent: str) -> list[tuple[str, str, str | None]]:
    rows = world.sql("SELECT id, state, tenant FROM runs WHERE started_by = %s ORDER BY id", parent)
    return [(i, s, t) for i, s, t in rows]


def executions(world: World, run_id: str) -> int:
    n: int = world.sql("SELECT count(*) FROM executions WHERE run_id = %s", run_id)[0][0]
    return n


def kinds(world: World, run_id: str) -> list[str]:
    return [k for (k,) in world.sql("SELECT kind FROM journal WHERE run_id = %s ORDER BY seq", run_id)]


def test_fan_out_children_keep_their_identities_and_tenant(world: World) -> None:
    with family_world(world) as c:
        world.worker(APP)
        world.worker(APP)
        parents = [c.enqueue("fan_out", {"n": 6}, tenant="acme", budget={"usd": 5}).id for _ in range(3)]
        for pid in parents:
            run = c.wait(pid, timeout=60)
            assert run.state == "succeeded", run.reason
            ids = [f"{pid}:op-{i}" for i in range(1, 7)]  # fixed where each start was made
            assert run.result == {"ids": ids, "results": [{"summary": f"T{i}"} for i in range(6)]}
            assert children(world, pid) == sorted((i, "succeeded", "acme") for i in ids)
            assert [executions(world, i) for i in ids] == [1] * 6  # each child did its work once
            assert executions(world, pid) == 0
            shared = world.sql("SELECT DISTINCT budget_id FROM runs WHERE started_by = %s", pid)
            assert shared == [(pid,)]  # the children spend from the parent's budget
            assert kinds(world, pid).count("child") == 6
            assert kinds(world, pid).count("child_result") == 6
        assert world.sql("SELECT count(*) FROM runs WHERE started_by IS NOT NULL")[0][0] == 18


def test_a_childs_failure_is_raised_in_the_parent(world: World) -> None:
    with family_world(world) as c:
        world.worker(APP)
        caught = c.wait(c.enqueue("catches", {"why": "no source"}).id, timeout=60)
        child = f"{caught.id}:op-1"
        assert caught.state == "succeeded"
        assert caught.result == {"caught": "failed", "child": child, "reason": "ValueError: no source"}
        uncaught = c.wait(c.enqueue("lets_fail", {"why": "bad"}).id, timeout=60)
        assert uncaught.state == "failed"
        assert uncaught.reason is not None and "ChildFailed" not in uncaught.reason
        assert f"child run '{uncaught.id}:op-1' (fail) ended failed: ValueError: bad" in uncaught.reason
        assert uncaught.error is not None and uncaught.error["type"] == "ChildFailed"


def test_a_parent_killed_after_starting_its_child_finds_the_same_child(world: World) -> None:
    with family_world(world) as c:
        armed = world.worker(APP, OUTLAST_FAILPOINTS="before_child_journaled")
        pid = c.enqueue("parent", {"gate": "g"}).id
        killed(armed)
        child = f"{pid}:op-1"
        assert [i for i, _, _ in children(world, pid)] == [child]  # committed ...
        assert "child" not in kinds(world, pid)  # ... its start not journaled
        world.sql("INSERT INTO gates VALUES ('g')")
        world.worker(APP)
        run = c.wait(pid, timeout=60)
        assert run.state == "succeeded", run.reason
        assert run.result == {"child": child, "result": {"summary": "G"}}
        assert [i for i, _, _ in children(world, pid)] == [child]  # never a second one
        assert executions(world, child) == 1


def test_a_parent_waits_for_its_child_with_no_worker_held_and_survives_a_kill(world: World) -> None:
    with family_world(world) as c:
        first = world.worker(APP)
        pid = c.enqueue("parent", {"gate": "g"}).id
        child = f"{pid}:op-1"
        waiting = reach(c, pid, "waiting", reason="child")
        assert waiting.owner is None and waiting.lease_expires_at is None and waiting.waits_for == child
        reach(c, child, "running")
        shown = world.cli("status", pid)
        assert shown.returncode == 0, shown.stderr
        assert "waiting (child)" in shown.stdout
        assert f"waiting for child run {child} (gated" in shown.stdout
        assert f"child        {child} gated running  <- waited for" in shown.stdout
        first.kill()  # the child in its gate, the parent waiting
        first.wait(10)
        world.sql("INSERT INTO gates VALUES ('g')")
        world.worker(APP)
        run = c.wait(pid, timeout=60)
        assert run.state == "succeeded", run.reason
        assert run.result == {"child": child, "result": {"summary": "G"}}
        assert [i for i, _, _ in children(world, pid)] == [child]
        assert executions(world, child) == 1
        info = json.loads(world.cli("status", child, "--json").stdout)
        assert info["run"]["started_by"] == pid


def test_cancelling_a_parent_cancels_its_children_and_theirs(world: World) -> None:
    with family_world(world) as c:
        world.worker(APP)
        top = c.enqueue("grandparent", {"gate": "g"}).id
        mid, low = f"{top}:op-1", f"{top}:op-1:op-1"
        reach(c, low, "running")
        reach(c, top, "waiting", reason="child")
        reach(c, mid, "waiting", reason="child")
        c.cancel(top)
        world.sql("INSERT INTO gates VALUES ('g')")  # the grandchild's tool in flight finishes
        for run_id in (top, mid, low):
            assert c.wait(run_id, timeout=60).state == "cancelled"
        assert executions(world, low) == 0  # stopped at its next crossing: no work done


def test_a_tenant_is_kept_filtered_and_checked(world: World) -> None:
    with family_world(world) as c:
        a = c.enqueue("summarize", {"text": "x"}, tenant="acme")
        c.enqueue("summarize", {"text": "y"}, tenant="globex")
        c.enqueue("summarize", {"text": "z"})
        assert [r.id for r in c.runs(tenant="acme")] == [a.id]
        c.cancel(a.id)  # never started: cancelled at once
        assert c.continue_run(a.id).tenant == "acme"  # a continuation keeps its tenant
        assert {r.tenant for r in c.runs(tenant="acme")} == {"acme"} and len(c.runs(tenant="acme")) == 2
        listed = world.cli("runs", "--tenant", "globex")
        assert listed.returncode == 0 and "tenant globex" in listed.stdout and a.id not in listed.stdout
        world.worker(APP)
        seen = c.wait(c.enqueue("whose", {"depth": 2}, tenant="initech").id, timeout=60)
        assert seen.result == ["initech"] * 3  # the run and its child and grandchild see it
        assert {r.tenant for r in c.runs(tenant="initech")} == {"initech"} and len(
            c.runs(tenant="initech")
        ) == 3
        with pytest.raises(InvalidInput, match="the tenant must be 1 to 100 printable characters"):
            c.enqueue("summarize", {"text": "x"}, tenant="a\nb")
        bad = world.cli("enqueue", "summarize", "--tenant", "")
        assert bad.returncode != 0 and "tenant" in bad.stderr and "Traceback" not in bad.stderr


def test_children_that_end_at_different_times_and_some_fail(world: World) -> None:
    with family_world(world) as c:
        world.worker(APP)
        pid = c.enqueue("mixed", {"n": 6}).id
        reach(c, pid, "waiting", reason="child")
        for i in (4, 1, 3, 0):  # the gates open out of order, the parent woken each time it waits
            world.sql("INSERT INTO gates VALUES (%s)", f"g{i}")
            reach(c, f"{pid}:op-{i + 1}", "succeeded")
        run = c.wait(pid, timeout=60)
        assert run.state == "succeeded", run.reason
        assert run.result == [
            {"summary": "G0"},
            {"summary": "G1"},
            {"failed": f"{pid}:op-3", "state": "failed"},
            {"summary": "G3"},
            {"summary": "G4"},
            {"failed": f"{pid}:op-6", "state": "failed"},
        ]
        assert len(children(world, pid)) == 6
        assert [executions(world, f"{pid}:op-{i}") for i in range(1, 7)] == [1, 1, 0, 1, 1, 0]
        waits = world.sql("SELECT count(*) FROM events WHERE run_id = %s AND kind = 'waiting'", pid)[0][0]
        assert waits >= 1
        assert kinds(world, pid).count("child_result") == 6


def test_a_replay_that_starts_another_child_is_refused(world: World) -> None:
    with family_world(world) as c:
        first = world.worker(APP)
        pid = c.enqueue("parent", {"gate": "g"}).id
        reach(c, pid, "waiting", reason="child")
        first.kill()
        first.wait(10)
        world.worker("tests.apps.family_v2:app")
        moved = world.cli("resume", pid, "--accept-program-change")
        assert moved.returncode == 0, moved.stderr
        run = reach(c, pid, "waiting", reason="resume_impossible")
        shown = world.cli("status", pid).stdout
        assert f"journal has start of child run {pid}:op-1 (gated)" in shown
        assert 'program asks start of child gated({"gate":"G"})' in shown
        assert run.journal_len == 1  # nothing more journaled, and no second child started
        assert [i for i, _, _ in children(world, pid)] == [f"{pid}:op-1"]


def test_a_gather_that_raised_still_waits_for_its_other_children_before_the_run_ends(world: World) -> None:
    with family_world(world) as c:
        world.worker(APP)
        pid = c.enqueue("gather_raises", {"gate": "g"}).id
        reach(c, f"{pid}:op-1", "failed")
        reach(c, f"{pid}:op-2", "running")
        time.sleep(1.5)  # long enough for the parent to have ended, had it not waited
        run = reach(c, pid, "waiting", reason="child")
        assert run.waits_for == f"{pid}:op-2" and run.result is None
        world.sql("INSERT INTO gates VALUES ('g')")
        run = c.wait(pid, timeout=60)
        assert (run.state, run.result) == ("succeeded", "caught")
        assert kinds(world, pid).count("child_result") == 2  # the sibling's outcome journaled too
        assert "fenced" not in world.logs().lower()


def test_children_start_and_wake_their_parent_without_waiting_for_a_sweep(world: World) -> None:
    with family_world(world) as c:
        world.worker(APP, OUTLAST_SWEEP_INTERVAL="60")  # a sweep at start, the next a minute later
        time.sleep(3)  # past the worker's first sweep
        began = time.monotonic()
        pid = c.enqueue("fan_out", {"n": 3, "child": "echo"}).id
        run = c.wait(pid, timeout=30)
        assert run.state == "succeeded" and run.result is not None
        assert run.result["results"] == [{"summary": "T0"}, {"summary": "T1"}, {"summary": "T2"}]
        assert time.monotonic() - began < 15  # handed out by the worker, not by a sweep
        waited = world.sql("SELECT count(*) FROM events WHERE run_id = %s AND kind = 'waiting'", pid)
        assert waited[0][0] >= 1  # it did wait for a child, and was woken


def test_children_keep_their_parents_priority(world: World) -> None:
    with family_world(world) as c:
        world.worker(APP)
        parents = {level: c.enqueue("fan_out", {"n": 2}, priority=level).id for level in ("high", "low")}
        for level, pid in parents.items():
            assert c.wait(pid, timeout=60).state == "succeeded"
            rows = world.sql("SELECT id, priority FROM runs WHERE started_by = %s ORDER BY id", pid)
            assert rows == [(f"{pid}:op-1", level), (f"{pid}:op-2", level)]
