"""Waiting, bounds and people under real failures: worker processes killed with SIGKILL while a run
awaits approval, sleeps on a timer or compensates, and deadlines that pass while no worker runs.
Assertions are on the world the tools act on (tests/apps/people.py), the journal and the run row."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import psycopg
import pytest

from outlast import Client
from outlast._journal import args_hash
from outlast._model import RunRecord
from outlast.errors import DecisionRefused
from outlast.testing.clock import move_clock
from tests.apps import people
from tests.conftest import World, wait_for
from tests.crash import killed, streams_drained

pytestmark = pytest.mark.crash

APP = "tests.apps.people:app"


@contextmanager
def people_world(world: World) -> Iterator[Client]:
    people.setup(world.database_url, world.schema)
    client = Client(settings=world.settings())
    try:
        yield client
    finally:
        client.close()


def reach(c: Client, run_id: str, *states: str, timeout: float = 30.0) -> RunRecord:
    def look() -> RunRecord | None:
        run = c.status(run_id)
        return run if run.state in states else None

    found: RunRecord = wait_for(look, timeout, 0.1, f"run {run_id} to be {' or '.join(states)}")
    return found


def effects(world: World, run_id: str) -> list[tuple[str, str, dict[str, Any], datetime]]:
    rows = world.sql("SELECT op_id, tool, args, at FROM effects WHERE run_id = %s ORDER BY id", run_id)
    return [(op, tool, args, at) for op, tool, args, at in rows]


def journal(world: World, run_id: str) -> list[tuple[str, str | None, dict[str, Any]]]:
    rows = world.sql("SELECT kind, op_id, body FROM journal WHERE run_id = %s ORDER BY seq", run_id)
    return [(kind, op, json.loads(body)) for kind, op, body in rows]


def snapshot(world: World, run_id: str) -> tuple[Any, ...]:
    """Everything a worker could have changed about a waiting run."""
    run = world.sql(
        "SELECT state, reason, owner, lease_expires_at, fencing_token, journal_len, journal_head, wake_at "
        "FROM runs WHERE id = %s",
        run_id,
    )[0]
    req = world.sql(
        "SELECT status, decided_by, expires_at FROM approvals WHERE run_id = %s ORDER BY op_id", run_id
    )
    return (run, tuple(req), tuple(journal(world, run_id)))


def kill(*procs: Any) -> None:
    for p in procs:
        p.send_signal(signal.SIGKILL)
    for p in procs:
        assert p.wait(10) == -signal.SIGKILL


def test_worker_killed_while_a_run_awaits_approval_changes_nothing(world: World) -> None:
    with people_world(world) as c:
        rid = c.enqueue("approve_publish", {"text": "ship it", "expires_in": 600}).id
        first = world.worker(APP)
        reach(c, rid, "awaiting_approval")
        streams_drained(world, ["default"])
        before = snapshot(world, rid)
        assert before[0][:4] == ("awaiting_approval", "approval", None, None)
        kill(first)
        time.sleep(2.5)  # past the lease a holder would have had
        assert snapshot(world, rid) == before
        second = world.worker(APP)
        time.sleep(2.0)  # a new worker sweeps, reads and reclaims: none of it touches the run
        assert snapshot(world, rid) == before
        assert effects(world, rid) == []

        c.approve(rid, "op-1", approver="ops", comment="go ahead", args_hash=args_hash({"text": "ship it"}))
        done = reach(c, rid, "succeeded", "failed")
        assert done.state == "succeeded", done.reason
        assert done.fencing_token == before[0][4] + 1  # one claim, by the second worker
        assert [(op, tool, args) for op, tool, args, _ in effects(world, rid)] == [
            ("op-2", "publish", {"text": "ship it"})
        ]
        assert second.poll() is None


def test_a_timer_survives_a_restart_of_every_worker(world: World) -> None:
    with people_world(world) as c:
        a, b = world.worker(APP), world.worker(APP)
        rid = c.enqueue("nap", {"seconds": 3}).id
        run = reach(c, rid, "waiting")
        assert (run.reason, run.owner) == ("timer", None)
        kill(a, b)
        (timer,) = [body for kind, _, body in journal(world, rid) if kind == "timer"]
        until = datetime.fromisoformat(timer["until"])
        wait_for(lambda: world.sql("SELECT now() > %s", until)[0][0], 10, what="the due time to pass")
        time.sleep(0.5)
        assert c.status(rid).state == "waiting" and effects(world, rid) == []  # nobody was up

        world.worker(APP)
        done = reach(c, rid, "succeeded", "failed")
        assert done.state == "succeeded", done.reason
        ((op, tool, _args, at),) = effects(world, rid)  # once
        assert (op, tool) == ("op-2", "publish")
        assert at >= until
        streams_drained(world, ["default"])


def test_a_deadline_passes_with_no_worker_running(world: World) -> None:
    with people_world(world) as c:
        w = world.worker(APP)
        # Deadlines far enough off to be reached on a loaded machine, then passed by the schema's
        # clock (no sleep, nothing racing them): the nap's own timer stays ahead of them.
        sleeping = c.enqueue("nap", {"seconds": 600}, deadline=30.0).id
        asking = c.enqueue("approve_publish", {"text": "late"}, deadline=30.0).id
        reach(c, sleeping, "waiting")
        reach(c, asking, "awaiting_approval")
        kill(w)
        queued = c.enqueue("nap", {"seconds": 0}, deadline=30.0).id
        with psycopg.connect(world.database_url, options=f"-c search_path={world.schema}") as conn:
            move_clock(conn, 31)
        states = [c.status(r).state for r in (sleeping, asking, queued)]
        assert states == ["waiting", "awaiting_approval", "queued"]  # nobody saw them
        world.worker(APP)
        for rid in (sleeping, asking, queued):
            done = reach(c, rid, "timed_out", "succeeded", "failed", timeout=15)
            assert done.state == "timed_out" and done.reason == "deadline passed"
            assert effects(world, rid) == []
        # A decision for the timed-out run's request is refused: the run no longer awaits it.
        with pytest.raises(DecisionRefused, match="no longer awaiting"):
            c.approve(asking, "op-1", approver="ops", comment="late", args_hash=args_hash({"text": "late"}))


def test_policy_refuses_a_transfer_while_a_transfer_is_in_doubt(world: World) -> None:
    with people_world(world) as c:
        rid = c.enqueue("transfers", {"amount": 5, "to": "bob"}).id
        killed(world.worker(APP, OUTLAST_FAILPOINTS="after_effect:transfer"))
        assert len(effects(world, rid)) == 1  # the transfer happened; its result was never journaled
        world.worker(APP)
        done = reach(c, rid, "failed", "succeeded", "waiting")
        assert done.state == "failed"
        assert done.error is not None and done.error["type"] == "PolicyRefused"
        assert "a transfer is in doubt" in (done.reason or "")
        assert [(op, tool) for op, tool, _, _ in effects(world, rid)] == [("op-1", "transfer")]  # no second
        kinds = [(k, op) for k, op, _ in journal(world, rid)]
        assert kinds == [("intention", "op-1"), ("in_doubt", "op-1"), ("refused", "op-2")]


def test_a_compensation_cut_short_is_not_claimed_as_undone(world: World) -> None:
    with people_world(world) as c:
        rid = c.enqueue("trip", {"items": ["hotel"], "fail": True}).id
        killed(world.worker(APP, OUTLAST_FAILPOINTS="after_effect:compensate:book"))
        assert world.sql("SELECT count(*) FROM undone WHERE run_id = %s", rid) == [(1,)]
        world.worker(APP)
        done = reach(c, rid, "failed", "succeeded", "waiting")
        assert done.state == "failed"
        # It may have happened (it did), but nothing says so without its result: not compensated,
        # and not run a second time.
        assert done.result["compensated"] == []
        (unsure,) = done.result["not_compensated"]
        assert unsure["operation"] == "op-1" and "in doubt" in unsure["why"]
        assert world.sql("SELECT count(*) FROM undone WHERE run_id = %s", rid) == [(1,)]
        kinds = [(k, op) for k, op, _ in journal(world, rid)]
        assert kinds[-2:] == [("intention", "undo-op-1"), ("in_doubt", "undo-op-1")]


def test_a_reservation_cut_short_by_a_crash_is_not_lost(world: World) -> None:
    with people_world(world) as c:
        rid = c.enqueue("spend_seq", {"n": 2}, budget={"usd": 2}).id
        killed(world.worker(APP, OUTLAST_FAILPOINTS="before_intention:spend"))
        world.worker(APP)
        done = reach(c, rid, "succeeded", "exhausted", "failed")
        assert done.state == "succeeded", done.reason
        assert len(effects(world, rid)) == 2
        assert world.sql("SELECT spent, reserved FROM budgets WHERE budget_id = %s", rid) == [(2, 0)]
