"""Waiting, bounds and people, on real Postgres and Redis: approvals, durable timers, deadlines,
budgets, cancellation with compensations, continuation runs and the policy hook.

Workers run in-process (each on its own thread and event loop, so that the synchronous client and
``wait_for`` can be used from the test) unless a real process is the point. Assertions are on the
world the tools act on (tests/apps/people.py: ``effects``, ``undone``), on the journal and on the
``approvals`` and ``budgets`` rows, not only on run states.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from outlast import App, Client, OutlastError
from outlast._journal import args_hash
from outlast._model import RunRecord
from outlast.errors import DecisionRefused
from outlast.queue import Queue
from outlast.store import Store
from outlast.worker.loop import Worker
from tests.apps import people
from tests.conftest import World, wait_for
from tests.crash import last_message

OK = "reviewed: fine to publish"


# -- the harness ---------------------------------------------------------------------------------


@contextmanager
def worker(world: World, app: App = people.app, **settings: Any) -> Iterator[Worker]:
    """A real worker, in this process: its own thread and event loop; stopped (handing over) on exit."""
    s = world.settings(**settings)
    assert s.database_url and s.redis_url
    ready = threading.Event()
    box: dict[str, Any] = {}

    async def serve() -> None:
        store = Store(s.database_url or "", s.schema, max_size=4)
        queue = Queue(s.redis_url or "", s.prefix)
        await store.open()
        w = Worker(app, store, queue, s, ["default"])
        box["loop"], box["worker"] = asyncio.get_running_loop(), w
        ready.set()
        try:
            await w.run()
        finally:
            await store.close()
            await queue.close()

    def main() -> None:
        try:
            asyncio.run(serve())
        except BaseException as exc:  # surfaced in the test, not lost in the thread
            box["error"] = exc
            ready.set()

    t = threading.Thread(target=main, name="in-process-worker", daemon=True)
    t.start()
    assert ready.wait(15), "the in-process worker did not start"
    if "error" in box:
        raise box["error"]
    try:
        yield box["worker"]
    finally:
        box["loop"].call_soon_threadsafe(box["worker"].stop)
        t.join(20)
        assert not t.is_alive(), "the in-process worker did not stop"
        if "error" in box:
            raise box["error"]


@pytest.fixture
def client(world: World, monkeypatch: pytest.MonkeyPatch) -> Iterator[Client]:
    """The people app's tables in the test's schema; in-process tools find them through the env."""
    monkeypatch.setenv("OUTLAST_DATABASE_URL", world.database_url)
    monkeypatch.setenv("OUTLAST_SCHEMA", world.schema)
    people.setup(world.database_url, world.schema)
    with Client(settings=world.settings(), app=people.app) as c:
        yield c


def reach(c: Client, run_id: str, *states: str, timeout: float = 20.0) -> RunRecord:
    """Wait until the run is in one of ``states``; return it."""

    def look() -> RunRecord | None:
        run = c.status(run_id)
        return run if run.state in states else None

    found: RunRecord = wait_for(look, timeout, 0.05, f"run {run_id} to be {' or '.join(states)}")
    return found


def effects(world: World, run_id: str, tool: str | None = None) -> list[dict[str, Any]]:
    rows = world.sql(
        "SELECT op_id, tool, args, at FROM effects WHERE run_id = %s AND (%s::text IS NULL OR tool = %s) "
        "ORDER BY id",
        run_id,
        tool,
        tool,
    )
    return [{"op": op, "tool": t, "args": a, "at": at} for op, t, a, at in rows]


def undone(world: World, run_id: str) -> list[tuple[str, str]]:
    """(compensation operation, item) of every compensation that ran, in the order they ran."""
    rows = world.sql("SELECT op_id, args->>'item' FROM undone WHERE run_id = %s ORDER BY id", run_id)
    return [(op, item) for op, item in rows]


def journal(world: World, run_id: str) -> list[tuple[str, str | None, dict[str, Any]]]:
    rows = world.sql("SELECT kind, op_id, body FROM journal WHERE run_id = %s ORDER BY seq", run_id)
    return [(kind, op, json.loads(body)) for kind, op, body in rows]


def kinds(world: World, run_id: str) -> list[tuple[str, str | None]]:
    return [(k, op) for k, op, _ in journal(world, run_id)]


def approval(world: World, run_id: str, op_id: str = "op-1") -> dict[str, Any]:
    cols = ", ".join(
        [
            "action",
            "args",
            "args_hash",
            "policy_version",
            "approvers",
            "expires_at",
            "status",
            "decided_by",
            "comment",
            "new_args",
        ]
    )
    rows = world.sql(f"SELECT {cols} FROM approvals WHERE run_id = %s AND op_id = %s", run_id, op_id)
    assert rows, f"no approval {op_id} for run {run_id}"
    return dict(zip(cols.split(", "), rows[0], strict=True))


def events(world: World, run_id: str, kind: str) -> int:
    return int(world.sql("SELECT count(*) FROM events WHERE run_id = %s AND kind = %s", run_id, kind)[0][0])


def budget(world: World, budget_id: str) -> dict[str, tuple[Any, Any, Any]]:
    """name -> (limit, spent, reserved), as Postgres holds them (numeric)."""
    rows = world.sql("SELECT name, limit_value, spent, reserved FROM budgets WHERE budget_id = %s", budget_id)
    return {name: (limit, spent, reserved) for name, limit, spent, reserved in rows}


def stream_clear(world: World) -> bool:
    """Every entry of the default stream was acknowledged (acknowledging deletes it too)."""
    r = world.redis()
    try:
        key = Queue(world.redis_url, world.prefix, client=object()).stream("default")
        return bool(r.xlen(key) == 0 and (not r.exists(key) or r.xpending(key, "workers")["pending"] == 0))
    finally:
        r.close()


def hash_of(args: dict[str, Any]) -> str:
    return args_hash(args)


def gate(world: World, name: str) -> None:
    world.sql("INSERT INTO gates (name) VALUES (%s) ON CONFLICT DO NOTHING", name)


def started(world: World, run_id: str) -> bool:
    return bool(world.sql("SELECT count(*) FROM started WHERE run_id = %s", run_id)[0][0])


# -- approvals ---------------------------------------------------------------------------------


def test_approval_frees_the_worker_and_only_a_valid_decision_counts(world: World, client: Client) -> None:
    c = client
    args = {"text": "launch notes"}
    rid = c.enqueue("approve_publish", {**args, "approvers": ["ops", "sec"], "expires_in": 3600}).id
    with worker(world):
        run = reach(c, rid, "awaiting_approval")
        # No worker is held: no owner, no lease, the stream entry acknowledged.
        assert (run.owner, run.lease_expires_at, run.reason) == (None, None, "approval")
        wait_for(lambda: stream_clear(world), 10, what="the stream entry to be acknowledged")
        req = approval(world, rid)
        assert req["action"] == "publish" and req["args"] == args
        assert req["args_hash"] == hash_of(args) and req["policy_version"] == "p1"
        assert req["approvers"] == ["ops", "sec"] and req["status"] == "pending"
        db_now = world.sql("SELECT now()")[0][0]
        assert timedelta(seconds=3590) < req["expires_at"] - db_now <= timedelta(seconds=3600)
        assert kinds(world, rid) == [("approval", "op-1")]
        assert effects(world, rid) == []

        h = req["args_hash"]
        refused = [
            ("'mallory' may not decide", dict(approver="mallory", comment=OK, args_hash=h)),
            ("for other arguments", dict(approver="ops", comment=OK, args_hash=hash_of({"text": "launch!"}))),
            ("1 to 500 non-blank", dict(approver="ops", comment="   \n ", args_hash=h)),
            ("1 to 500 non-blank", dict(approver="ops", comment="", args_hash=h)),
            ("1 to 500 non-blank", dict(approver="ops", comment="x" * 501, args_hash=h)),
        ]
        for why, kw in refused:
            with pytest.raises(DecisionRefused, match=why):
                c.approve(rid, "op-1", **kw)
        with pytest.raises(DecisionRefused, match="no such approval request"):
            c.approve(rid, "op-9", approver="ops", comment=OK, args_hash=h)
        # Nothing changed: still pending, no decision event, the run still waits, nothing ran.
        assert approval(world, rid)["status"] == "pending"
        assert events(world, rid, "decision") == 0
        assert c.status(rid).state == "awaiting_approval"

        long_ok = "y" * 500  # the upper bound is allowed
        c.approve(rid, "op-1", approver="ops", comment=long_ok, args_hash=h)
        done = reach(c, rid, "succeeded", "failed")
        assert done.state == "succeeded", done.reason
        assert [e["args"] for e in effects(world, rid, "publish")] == [args]
        decided = approval(world, rid)
        assert (decided["status"], decided["decided_by"], decided["comment"]) == ("approved", "ops", long_ok)

        # The identical decision again: accepted, changes nothing.
        again = c.approve(rid, "op-1", approver="ops", comment=long_ok, args_hash=h)
        assert again.state == "succeeded"
        assert events(world, rid, "decision") == 1
        assert approval(world, rid) == decided
        # A contradictory one is refused: another verdict, another approver, another comment.
        with pytest.raises(DecisionRefused, match="already approved by ops"):
            c.reject(rid, "op-1", approver="ops", comment=long_ok, args_hash=h)
        with pytest.raises(DecisionRefused, match="already approved by ops"):
            c.approve(rid, "op-1", approver="sec", comment=long_ok, args_hash=h)
        with pytest.raises(DecisionRefused, match="already approved by ops"):
            c.approve(rid, "op-1", approver="ops", comment="changed my mind", args_hash=h)
        assert events(world, rid, "decision") == 1
        assert len(effects(world, rid)) == 1
        assert [k for k, _ in kinds(world, rid)] == ["approval", "decision", "intention", "result"]


def test_revise_gives_new_args_that_need_their_own_approval(world: World, client: Client) -> None:
    c = client
    rid = c.enqueue("approve_publish", {"text": "draft one"}).id
    with worker(world):
        reach(c, rid, "awaiting_approval")
        h1 = approval(world, rid)["args_hash"]
        revised = {"text": "draft two"}
        c.revise(rid, "op-1", approver="ops", comment="use the second draft", args_hash=h1, args=revised)
        # The workflow receives the new args and asks again: nothing is published meanwhile.
        wait_for(lambda: world.sql("SELECT count(*) FROM approvals WHERE run_id = %s", rid)[0][0] == 2)
        run = reach(c, rid, "awaiting_approval")
        assert run.owner is None
        first, second = approval(world, rid, "op-1"), approval(world, rid, "op-2")
        assert (first["status"], first["new_args"]) == ("revised", revised)
        assert (second["status"], second["args"]) == ("pending", revised)
        assert second["args_hash"] == hash_of(revised)
        assert effects(world, rid) == []
        # The same revision again is accepted and changes nothing; approving the closed request is refused.
        c.revise(rid, "op-1", approver="ops", comment="use the second draft", args_hash=h1, args=revised)
        with pytest.raises(DecisionRefused, match="already revised"):
            c.revise(rid, "op-1", approver="ops", comment="use the second draft", args_hash=h1, args={"t": 3})
        with pytest.raises(DecisionRefused, match="already revised"):
            c.approve(rid, "op-1", approver="ops", comment="use the second draft", args_hash=h1)
        # Approving op-2 with the hash of the first draft is refused: it is for other arguments.
        with pytest.raises(DecisionRefused, match="other arguments"):
            c.approve(rid, "op-2", approver="ops", comment=OK, args_hash=h1)
        assert effects(world, rid) == []

        c.approve(rid, "op-2", approver="ops", comment=OK, args_hash=hash_of(revised))
        done = reach(c, rid, "succeeded", "failed")
        assert done.state == "succeeded", done.reason
        assert [e["args"] for e in effects(world, rid)] == [revised]
        assert [d["status"] for d in done.result["decisions"]] == ["revised", "approved"]
        assert done.result["decisions"][0]["args"] == revised


def test_rejection_fails_the_run_unless_the_workflow_handles_it(world: World, client: Client) -> None:
    c = client
    plain = c.enqueue("approve_publish", {"text": "rash"}).id
    handled = c.enqueue("approve_or_fallback", {"text": "rash"}).id
    with worker(world):
        reach(c, plain, "awaiting_approval")
        said = world.cli("reject", plain, "op-1", "--as", "ops", "--comment", "not this week")
        assert said.returncode == 0 and f"run {plain}: op-1 rejected by ops" in said.stdout, said.stderr
        reach(c, handled, "awaiting_approval")
        h = hash_of({"text": "rash"})
        c.reject(handled, "op-1", approver="ops", comment="not this week", args_hash=h)
        failed = reach(c, plain, "failed", "succeeded")
        assert failed.state == "failed"
        assert failed.error is not None and failed.error["type"] == "ApprovalRejected"
        assert "ops rejected publish (op-1): not this week" in (failed.reason or "")
        assert effects(world, plain) == []

        went_on = reach(c, handled, "succeeded", "failed")
        assert went_on.state == "succeeded", went_on.reason
        (fallback,) = effects(world, handled)
        said = fallback["args"]["text"]
        assert said.startswith("fallback after: ") and "not this week" in said


def test_expiry_times_out_even_when_no_worker_ran(world: World, client: Client) -> None:
    c = client
    with worker(world):
        served = c.enqueue("approve_publish", {"text": "a", "expires_in": 1.0}).id
        unserved = c.enqueue("approve_publish", {"text": "b", "expires_in": 1.5}).id
        reach(c, unserved, "awaiting_approval")
        # A worker is up: the expiry wakes the run and it ends timed_out.
        done = reach(c, served, "timed_out", "succeeded", "failed")
        assert done.state == "timed_out" and "expired undecided" in (done.reason or "")
    # No worker runs while the second request expires.
    wait_for(lambda: world.sql("SELECT expires_at < now() FROM approvals WHERE run_id = %s", unserved)[0][0])
    with pytest.raises(DecisionRefused, match="expired"):
        c.approve(unserved, "op-1", approver="ops", comment=OK, args_hash=hash_of({"text": "b"}))
    assert approval(world, unserved)["status"] == "pending"
    assert c.status(unserved).state == "awaiting_approval"  # nobody saw it yet
    with worker(world):
        done = reach(c, unserved, "timed_out", "succeeded", "failed")
    assert done.state == "timed_out" and "expired undecided" in (done.reason or "")
    for rid in (served, unserved):
        assert effects(world, rid) == []
        assert [(k, b.get("status")) for k, _, b in journal(world, rid)] == [
            ("approval", None),
            ("decision", "expired"),
        ]
    # Still refused once the run has ended.
    with pytest.raises(DecisionRefused, match="expired"):
        c.approve(unserved, "op-1", approver="ops", comment=OK, args_hash=hash_of({"text": "b"}))


def test_policy_is_checked_again_after_approval(world: World, client: Client) -> None:
    c = client
    rid = c.enqueue("approve_publish", {"text": "on hold"}).id
    with worker(world):
        reach(c, rid, "awaiting_approval")
        gate(world, "frozen:publish")  # the world changed while the request waited
        c.approve(rid, "op-1", approver="ops", comment=OK, args_hash=hash_of({"text": "on hold"}))
        done = reach(c, rid, "failed", "succeeded")
    assert done.state == "failed"
    assert done.error is not None and done.error["type"] == "PolicyRefused"
    assert "policy refused publish: publish is frozen" in (done.reason or "")
    assert effects(world, rid) == []  # nothing dispatched
    assert kinds(world, rid) == [("approval", "op-1"), ("decision", "op-1"), ("refused", "op-2")]
    assert journal(world, rid)[-1][2]["reason"] == "publish is frozen"


def test_cli_decisions_end_to_end(world: World, client: Client) -> None:
    c = client
    rid = c.enqueue("approve_publish", {"text": "from the cli"}).id
    other = c.enqueue("approve_publish", {"text": "first draft"}).id
    with worker(world):
        reach(c, other, "awaiting_approval")
        revised = world.cli(
            "revise",
            other,
            "op-1",
            "--as",
            "ops",
            "--comment",
            "shorter",
            "--args",
            '{"text": "draft 2"}',
            "--args-hash",
            hash_of({"text": "first draft"}),
        )
        assert revised.returncode == 0 and "op-1 revised by ops" in revised.stdout, revised.stderr
        wait_for(lambda: world.sql("SELECT count(*) FROM approvals WHERE run_id = %s", other)[0][0] == 2)
        reach(c, other, "awaiting_approval")
        assert effects(world, other) == []
        seen = hash_of({"text": "draft 2"})
        approved = world.cli("approve", other, "op-2", "--as", "ops", "--comment", "ok", "--args-hash", seen)
        assert approved.returncode == 0, approved.stderr
        assert reach(c, other, "succeeded", "failed").state == "succeeded"
        assert [e["args"] for e in effects(world, other)] == [{"text": "draft 2"}]

        reach(c, rid, "awaiting_approval")
        shown = world.cli("status", rid)
        assert "awaiting_approval (approval)" in shown.stdout
        assert "approval     op-1 publish" in shown.stdout and "(approvers: ops)" in shown.stdout

        h = hash_of({"text": "from the cli"})
        wrong = world.cli("approve", rid, "op-1", "--as", "eve", "--comment", "ok", "--args-hash", h)
        assert wrong.returncode == 1 and "'eve' may not decide" in wrong.stderr, wrong.stderr
        altered = world.cli("approve", rid, "op-1", "--as", "ops", "--comment", "ok", "--args-hash", "0" * 64)
        assert altered.returncode == 1 and "for other arguments" in altered.stderr, altered.stderr
        blank = world.cli("reject", rid, "op-1", "--as", "ops", "--comment", "  ")
        assert blank.returncode == 1 and "non-blank" in blank.stderr
        assert "Traceback" not in wrong.stderr + altered.stderr + blank.stderr
        assert c.status(rid).state == "awaiting_approval"

        ok = world.cli("approve", rid, "op-1", "--as", "ops", "--comment", "ok", "--args-hash", h)
        assert ok.returncode == 0, ok.stderr
        assert "op-1 approved by ops" in ok.stdout
        done = reach(c, rid, "succeeded", "failed")
    assert done.state == "succeeded", done.reason
    assert [e["args"] for e in effects(world, rid)] == [{"text": "from the cli"}]
    again = world.cli("approve", rid, "op-1", "--as", "ops", "--comment", "ok", "--args-hash", h)
    assert again.returncode == 0, again.stderr  # the same decision: accepted, nothing changes
    contra = world.cli("reject", rid, "op-1", "--as", "ops", "--comment", "ok")
    assert contra.returncode == 1 and "already approved by ops" in contra.stderr
    assert len(effects(world, rid)) == 1 and events(world, rid, "decision") == 1
    shown = world.cli("status", rid)
    assert "approved by ops: ok" in shown.stdout


def test_approval_journaled_for_other_args_is_resume_impossible(world: World, client: Client) -> None:
    c = client
    rid = c.enqueue("approve_publish", {"text": "hello"}).id
    with worker(world):
        reach(c, rid, "awaiting_approval")
    admitted = c.status(rid).program
    c.approve(rid, "op-1", approver="ops", comment=OK, args_hash=hash_of({"text": "hello"}))
    with worker(world, app=people.app_v2, move_parked="off"):  # moved by hand, below
        run = reach(c, rid, "waiting")
        assert run.reason == "program_changed" and run.program == admitted
        moved = world.cli("resume", rid, "--accept-program-change")
        assert moved.returncode == 0, moved.stderr
        wait_for(lambda: c.status(rid).reason == "resume_impossible", what="the replay to be refused")
    run = c.status(rid)
    assert run.state == "waiting"
    message = last_message(world, rid)
    said = (
        'resume impossible at crossing #1: journal has approval of publish({"text":"hello"}), '
        'program asks approval of publish({"text":"hello -- the team"})'
    )
    assert said in message
    assert effects(world, rid) == []
    assert kinds(world, rid) == [("approval", "op-1")]  # the approval of other args was not acted on


def test_a_call_in_flight_beside_a_durable_wait_keeps_its_result(world: World, client: Client) -> None:
    c = client
    with worker(world):
        asking = c.enqueue("ask_while_working", {"gate_name": "a"}).id
        sleeping = c.enqueue("ask_while_working", {"gate_name": "s", "wait": "timer"}).id
        wait_for(lambda: started(world, asking) and started(world, sleeping), what="both calls in flight")
        time.sleep(0.6)
        # The run keeps its lease while a call of its own is in flight, even past the timer's due time.
        assert [c.status(r).state for r in (asking, sleeping)] == ["running", "running"]
        gate(world, "open:a")
        gate(world, "open:s")
        reach(c, asking, "awaiting_approval")
        assert kinds(world, asking) == [("intention", "op-1"), ("approval", "op-2"), ("result", "op-1")]
        c.approve(asking, "op-2", approver="ops", comment=OK, args_hash=hash_of({"text": "in parallel"}))
        for rid in (asking, sleeping):
            done = reach(c, rid, "succeeded", "failed", "waiting")
            assert done.state == "succeeded", f"{done.state} ({done.reason})"
            assert [e["tool"] for e in effects(world, rid)] == ["hold", "publish"]  # once each
            assert not any(k == "in_doubt" for k, _ in kinds(world, rid))


def test_a_wait_beside_calls_made_in_turn_waits_for_the_later_call_too(world: World, client: Client) -> None:
    """The wait is let through once the first call ends; the branch's second call starts at once:
    the run must keep its lease until that call's result is journaled, never wait (and leave the
    call in doubt) while it is in flight."""
    c = client
    with worker(world):
        sleeping = c.enqueue("calls_in_turn_beside_a_wait", {"gate_name": "s"}).id
        asking = c.enqueue("calls_in_turn_beside_a_wait", {"gate_name": "a", "wait": "approval"}).id
        wait_for(
            lambda: started(world, sleeping) and started(world, asking), what="both held calls in flight"
        )
        time.sleep(0.6)  # past the timer's due time
        assert [c.status(r).state for r in (sleeping, asking)] == ["running", "running"]
        gate(world, "open:s")
        gate(world, "open:a")
        reach(c, asking, "awaiting_approval", "waiting")
        c.approve(asking, "op-1", approver="ops", comment=OK, args_hash=hash_of({"text": "in turn"}))
        for rid in (sleeping, asking):
            done = reach(c, rid, "succeeded", "failed", "waiting")
            assert done.state == "succeeded", f"{done.state} ({done.reason})"
            assert [e["tool"] for e in effects(world, rid)] == ["publish", "hold"]  # once each
            assert not any(k == "in_doubt" for k, _ in kinds(world, rid))


# -- timers ------------------------------------------------------------------------------------


def test_durable_sleep_holds_no_worker_and_wakes_at_its_time(world: World, client: Client) -> None:
    c = client
    with worker(world):
        db_now = world.sql("SELECT now()")[0][0]
        by_seconds = c.enqueue("nap", {"seconds": 2}).id
        by_date = c.enqueue("nap", {"until": (db_now + timedelta(seconds=2.5)).isoformat()}).id
        for rid in (by_seconds, by_date):
            run = reach(c, rid, "waiting")
            assert (run.reason, run.owner, run.lease_expires_at) == ("timer", None, None)
            assert effects(world, rid) == []
        wait_for(lambda: stream_clear(world), 10, what="the stream entries to be acknowledged")
        for rid in (by_seconds, by_date):
            done = reach(c, rid, "succeeded", "failed")
            assert done.state == "succeeded", done.reason
    for rid in (by_seconds, by_date):
        timer = [b for k, _, b in journal(world, rid) if k == "timer"]
        assert len(timer) == 1
        until = datetime.fromisoformat(timer[0]["until"])
        (woke,) = effects(world, rid)
        assert woke["at"] >= until, f"woken {until - woke['at']} before its time"
        assert woke["at"] - until < timedelta(seconds=5), f"woken {woke['at'] - until} late"
    until = datetime.fromisoformat(next(b for k, _, b in journal(world, by_date) if k == "timer")["until"])
    assert abs(until - (db_now + timedelta(seconds=2.5))) < timedelta(milliseconds=1)


# -- deadlines ---------------------------------------------------------------------------------


def test_deadline_that_passed_while_no_worker_ran(world: World, client: Client) -> None:
    c = client
    with worker(world):
        sleeping = c.enqueue("nap", {"seconds": 30}, deadline=2.0).id
        reach(c, sleeping, "waiting")
    queued = c.enqueue("nap", {"seconds": 0}, deadline=0.5).id
    time.sleep(2.2)  # both deadlines pass while no worker runs
    assert c.status(queued).state == "queued" and c.status(sleeping).state == "waiting"
    with worker(world):
        for rid in (queued, sleeping):
            done = reach(c, rid, "timed_out", "succeeded", "failed", timeout=10)
            assert done.state == "timed_out" and "deadline passed" in (done.reason or "")
    assert effects(world, queued) == [] and effects(world, sleeping) == []
    assert kinds(world, queued) == []


def test_deadline_reached_at_a_crossing(world: World, client: Client) -> None:
    c = client
    with worker(world):
        rid = c.enqueue("held", {"gate_name": "slow"}, deadline=1.0).id
        wait_for(lambda: started(world, rid), what="the call to be in flight")
        time.sleep(1.3)
        assert c.status(rid).state == "running"  # a live lease: the sweeper leaves it alone
        gate(world, "open:slow")
        done = reach(c, rid, "timed_out", "succeeded", "failed")
    assert done.state == "timed_out"
    assert "its deadline" in (done.reason or "") and "op-2" in (done.reason or "")
    assert [e["tool"] for e in effects(world, rid)] == ["hold"]  # the next call never went out
    assert kinds(world, rid) == [("intention", "op-1"), ("result", "op-1")]  # the result is journaled


def test_continued_run_refers_to_the_original_and_keeps_its_deadline(world: World, client: Client) -> None:
    c = client
    with worker(world):
        first = c.enqueue("nap", {"seconds": 0}, deadline=60)
        assert reach(c, first.id, "succeeded").deadline == first.deadline
        with pytest.raises(OutlastError, match="never resumed"):
            c.resume(first.id)
        gone = world.cli("resume", first.id)
        assert gone.returncode == 1 and "a finished run is never resumed" in gone.stderr
        with pytest.raises(OutlastError, match="already succeeded"):
            c.cancel(first.id)
        shown = world.cli("continue", first.id)
        assert shown.returncode == 0 and f"(continues {first.id})" in shown.stdout, shown.stderr
        nxt = c.runs()[0]
        assert nxt.id != first.id and nxt.parent_id == first.id
        assert nxt.deadline == first.deadline  # not renewed
        assert reach(c, nxt.id, "succeeded").state == "succeeded"
        assert c.status(first.id).state == "succeeded"  # the original never changes

        short = c.enqueue("nap", {"seconds": 0}, deadline=1.0)
        reach(c, short.id, "succeeded")
        time.sleep(1.1)
        late = c.continue_run(short.id)
        assert late.parent_id == short.id and late.deadline == short.deadline
        done = reach(c, late.id, "timed_out", "succeeded", "failed")
    assert done.state == "timed_out"
    assert effects(world, late.id) == []
    assert len(effects(world, short.id)) == 1 and len(effects(world, nxt.id)) == 1


# -- budgets -----------------------------------------------------------------------------------


@pytest.mark.parametrize("plain", [False, True], ids=["gather-return-exceptions", "plain-gather"])
def test_twenty_parallel_dispatches_against_a_budget_for_ten(
    world: World, client: Client, plain: bool
) -> None:
    c = client
    with worker(world):
        rid = c.enqueue("fan", {"n": 20, "plain": plain}, budget={"usd": 10}).id
        done = reach(c, rid, "exhausted", "succeeded", "failed")
        time.sleep(0.5)  # anything still in flight would land now
    assert done.state == "exhausted", done.reason
    assert "budget exhausted: usd (limit 10" in (done.reason or "")
    assert len(effects(world, rid, "spend")) == 10  # exactly ten dispatched
    limit, spent, reserved = budget(world, rid)["usd"]
    assert (limit, spent, reserved) == (10, 10, 0)
    # Every dispatched call's result was journaled before the run ended (none left pending).
    j = kinds(world, rid)
    assert sorted(str(op) for k, op in j if k == "intention") == sorted(
        str(op) for k, op in j if k == "result"
    )
    assert len([k for k, _ in j if k == "intention"]) == 10


def test_continued_runs_share_one_budget_across_worker_processes(world: World, client: Client) -> None:
    c = client
    origin = c.enqueue("spend_seq", {"n": 0}, budget={"usd": 10}).id
    world.worker("tests.apps.people:app")
    world.worker("tests.apps.people:app")
    assert reach(c, origin, "succeeded", timeout=30).state == "succeeded"
    ids = [c.continue_run(origin, {"n": 1}).id for _ in range(20)]
    assert all(c.status(i).budget_id == origin and c.status(i).parent_id == origin for i in ids)
    ends = [reach(c, i, "succeeded", "exhausted", "failed", timeout=30) for i in ids]
    assert sorted(r.state for r in ends) == ["exhausted"] * 10 + ["succeeded"] * 10
    assert all("usd (limit 10" in (r.reason or "") for r in ends if r.state == "exhausted")
    dispatched = world.sql("SELECT count(*) FROM effects WHERE tool = 'spend'")[0][0]
    assert dispatched == 10
    limit, spent, reserved = budget(world, origin)["usd"]
    assert (limit, spent, reserved) == (10, 10, 0)
    assert spent + reserved <= limit
    # One more continuation cannot exceed the original budget.
    more = c.continue_run(origin, {"n": 1}).id
    assert reach(c, more, "exhausted", "succeeded", timeout=30).state == "exhausted"
    assert world.sql("SELECT count(*) FROM effects WHERE tool = 'spend'")[0][0] == 10


def test_out_of_budget_and_charge_and_status(world: World, client: Client) -> None:
    c = client
    with worker(world):
        seq = c.enqueue("spend_seq", {"n": 5}, budget={"usd": 3, "calls": 100}).id
        # Mixed int and float amounts: the limits, the estimates and the actuals all go through.
        priced = c.enqueue("priced_once", {"actual": 0.25}, budget={"usd": 5.5, "calls": 3}).id
        over = reach(c, seq, "exhausted", "succeeded", "failed")
        ok = reach(c, priced, "succeeded", "exhausted", "failed")
    assert over.state == "exhausted"
    assert over.error is not None and over.error["type"] == "BudgetExhausted"
    assert "usd (limit 3, spent 3, reserved 0, spend needs 1)" in (over.reason or "")
    assert len(effects(world, seq)) == 3
    assert budget(world, seq)["usd"] == (3, 3, 0)

    assert ok.state == "succeeded", ok.reason
    b = budget(world, priced)
    assert b["usd"] == (Decimal("5.5"), Decimal("0.25"), 0)  # the actual replaced the estimate of 1
    assert b["calls"] == (3, 1, 0)  # not charged: the estimate stands
    shown = world.cli("status", priced)
    assert "budget       usd: limit 5.5, spent 0.25, reserved 0" in shown.stdout, shown.stdout
    assert "budget       calls: limit 3, spent 1, reserved 0" in shown.stdout
    shown = json.loads(world.cli("status", seq, "--json").stdout)
    assert {"name": "usd", "limit_value": 3.0, "spent": 3.0, "reserved": 0.0} in shown["budget"]


def test_status_shows_what_is_reserved_while_a_call_is_in_flight(world: World, client: Client) -> None:
    c = client
    with worker(world):
        rid = c.enqueue("held", {"gate_name": "paid", "paid": True}, budget={"usd": 5}).id
        wait_for(lambda: started(world, rid), what="the paid call to be in flight")
        shown = world.cli("status", rid)
        assert "budget       usd: limit 5, spent 0, reserved 2" in shown.stdout, shown.stdout
        gate(world, "open:paid")
        done = reach(c, rid, "succeeded", "failed")
    assert done.state == "succeeded", done.reason
    assert budget(world, rid)["usd"] == (5, 2, 0)
    assert "budget       usd: limit 5, spent 2, reserved 0" in world.cli("status", rid).stdout


# -- cancellation ------------------------------------------------------------------------------


def test_cancel_a_queued_run(world: World, client: Client) -> None:
    c = client
    rid = c.enqueue("trip", {"items": ["a"]}).id
    run = c.cancel(rid)
    assert (run.state, run.reason) == ("cancelled", "cancelled before it started")
    with worker(world):
        wait_for(lambda: stream_clear(world), 10, what="the entry to be acknowledged")
        time.sleep(0.5)
    assert c.status(rid).state == "cancelled"
    assert effects(world, rid) == [] and undone(world, rid) == [] and kinds(world, rid) == []
    with pytest.raises(OutlastError, match="already cancelled"):
        c.cancel(rid)


def test_cancel_during_an_in_flight_call(world: World, client: Client) -> None:
    c = client
    # A tool in flight has a grace of one heartbeat (TTL/3: 2 s here) from when the worker sees
    # the cancellation; the held call returns within it (test_abandoned.py: one that does not).
    with worker(world, lease_ttl=6.0) as w:
        rid = c.enqueue("trip", {"items": ["hotel", "car"], "hold_gate": "g"}).id
        wait_for(lambda: started(world, rid), what="the held call to be in flight")
        c.cancel(rid)
        wait_for(lambda: w.active[rid].execution.control.cancel.is_set(), what="a heartbeat to see it")
        run = c.status(rid)
        assert run.state == "running" and run.cancel_requested  # the call in flight goes on
        gate(world, "open:g")
        done = reach(c, rid, "cancelled", "succeeded", "failed")
    assert done.reason == "cancelled on request"
    # The call in flight finished and its result is journaled; nothing new went out after it.
    assert [e["tool"] for e in effects(world, rid)] == ["book", "book", "hold"]
    j = kinds(world, rid)
    assert ("result", "op-3") in j and ("cancel", "op-4") in j
    assert not any(op == "op-4" and k == "intention" for k, op in j)
    # Compensations ran once each, newest first, each journaled as an operation of its own.
    assert undone(world, rid) == [("undo-op-2", "car"), ("undo-op-1", "hotel")]
    assert j[j.index(("cancel", "op-4")) + 1 :] == [
        ("intention", "undo-op-2"),
        ("result", "undo-op-2"),
        ("intention", "undo-op-1"),
        ("result", "undo-op-1"),
    ]
    assert done.result == {
        "compensated": [{"operation": "op-2", "tool": "book"}, {"operation": "op-1", "tool": "book"}],
        "not_compensated": [],
    }


def test_cancel_a_run_waiting_on_a_timer_or_an_approval(world: World, client: Client) -> None:
    c = client
    with worker(world):
        sleeping = c.enqueue("nap", {"seconds": 60}).id
        asking = c.enqueue("approve_publish", {"text": "maybe"}).id
        reach(c, sleeping, "waiting")
        reach(c, asking, "awaiting_approval")
        for rid in (sleeping, asking):
            c.cancel(rid)
            done = reach(c, rid, "cancelled", "succeeded", "failed")
            assert done.state == "cancelled"
            assert effects(world, rid) == []
        # A decision that arrives after the run was cancelled is refused, and nothing is recorded.
        with pytest.raises(DecisionRefused):
            c.approve(asking, "op-1", approver="ops", comment=OK, args_hash=hash_of({"text": "maybe"}))
        assert approval(world, asking)["status"] == "pending"
        assert c.status(asking).state == "cancelled"
        time.sleep(0.5)
    assert effects(world, asking) == []
    assert kinds(world, sleeping) == [("timer", "op-1"), ("cancel", "op-1")]


def test_a_failed_compensation_is_never_reported_as_undone(world: World, client: Client) -> None:
    c = client
    with worker(world):
        rid = c.enqueue("trip", {"items": ["hotel", "stuck-car", "train"], "fail": True}).id
        done = reach(c, rid, "failed", "succeeded", "cancelled")
    assert done.state == "failed" and "the trip broke on purpose" in (done.reason or "")
    assert undone(world, rid) == [("undo-op-3", "train"), ("undo-op-1", "hotel")]
    assert done.result["compensated"] == [
        {"operation": "op-3", "tool": "book"},
        {"operation": "op-1", "tool": "book"},
    ]
    (stuck,) = done.result["not_compensated"]
    assert stuck["operation"] == "op-2" and "stuck-car cannot be released" in stuck["why"]
    failed_undo = [b for k, op, b in journal(world, rid) if op == "undo-op-2" and k == "result"]
    assert failed_undo and "error" in failed_undo[0]
    shown = world.cli("status", rid)
    assert shown.returncode == 0


def test_compensate_on_failure_only(world: World, client: Client) -> None:
    c = client
    with worker(world):
        failing = c.enqueue("trip_on_failure", {"items": ["seat"]}).id
        cancelled = c.enqueue("trip_on_failure", {"items": ["seat"], "hold_gate": "h"}).id
        failed = reach(c, failing, "failed", "succeeded")
        wait_for(lambda: started(world, cancelled), what="the held call")
        c.cancel(cancelled)
        gate(world, "open:h")
        stopped = reach(c, cancelled, "cancelled", "failed", "succeeded")
    assert failed.state == "failed" and "no seat left" in (failed.reason or "")
    assert undone(world, failing) == [("undo-op-1", "seat")]
    assert failed.result == {"compensated": [{"operation": "op-1", "tool": "book"}], "not_compensated": []}
    assert stopped.state == "cancelled"
    assert undone(world, cancelled) == []  # compensate_on=("failure",): a cancel compensates nothing
    assert stopped.result is None
    assert [e["tool"] for e in effects(world, cancelled)] == ["book", "hold"]
