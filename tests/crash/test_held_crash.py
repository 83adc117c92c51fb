"""Held results under real crashes: a worker process killed at each kind of fenced write a run
makes with a read's result held — before the write (``with_result_held:KIND``: the result dies
with its worker) and just after it (``after_fenced_write:KIND``: the write found the result
written first). A fresh worker takes the run over. Counted in the world: how many times the read
ran, the effects (children, ledger rows, capped dispatches, marks), and the budget spent against
the ledger; and the run ends as it should with no resume mismatch.

The writes a run makes only beside a parallel call (a park for a rate, an approval's wait, a
child's wait, an in-doubt declaration), or once a cancellation is known, are killed with the
result of that call held (the ``beside`` workflow).

The armed workers hold results until the run's next write (``OUTLAST_HOLD_MS`` a minute), so
that what is held at the kill does not depend on timing.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from outlast import Client
from outlast._journal import args_hash
from tests.apps import held
from tests.conftest import World, wait_for
from tests.crash import journal, killed

pytestmark = pytest.mark.crash

APP = "tests.apps.held:app"
HOLD_LONG = {"OUTLAST_HOLD_MS": "60000"}

# The write under test, and whether the read's result was written before it by another write of
# the run: the timer's entry carries it; a tool that costs or is capped (its result never held)
# has it written before it goes live. Those writes then find nothing held (a parallel call's
# result could be).
WRITES = {"finish": False, "child": False, "reserve": True, "slot": True, "wait": True, "release": False}


@contextmanager
def held_world(world: World) -> Iterator[Client]:
    held.setup(world.database_url, world.schema)
    client = Client(settings=world.settings())
    try:
        yield client
    finally:
        client.close()


def executions(world: World, run_id: str) -> dict[str, int]:
    rows = world.sql("SELECT what, count(*) FROM executions WHERE run_id = %s GROUP BY what", run_id)
    return {what: int(n) for what, n in rows}


@pytest.mark.parametrize("point", ["with_result_held", "after_fenced_write"])
@pytest.mark.parametrize("write", list(WRITES))
def test_killed_at_a_fenced_write_with_a_result_held(world: World, write: str, point: str) -> None:
    with held_world(world) as client:
        rid = client.enqueue("held", {"write": write}, queue="q", budget={"usd": 10}).id
        spec = f"{point}:{write}"
        if write == "release":  # a hand-over: the worker is stopped while the workflow pauses
            armed = world.worker(APP, "--queue", "q", OUTLAST_FAILPOINTS=spec, HELD_PAUSE="60", **HOLD_LONG)
            wait_for(lambda: executions(world, rid).get("peek:first"), 30, 0.1, "the first read")
            armed.send_signal(signal.SIGTERM)
        else:
            armed = world.worker(APP, "--queue", "q", OUTLAST_FAILPOINTS=spec, **HOLD_LONG)
        killed(armed)
        written = [(k, op) for _s, k, op, _b in journal(world, rid)][:1] == [("result", "op-1")]
        # Killed before the write: the held result died with its worker, unless an append of
        # the run carried it first. Killed after it: the write found it written.
        assert written == (point == "after_fenced_write" or WRITES[write]), journal(world, rid)

        world.worker(APP, "--queue", "q")
        run = wait_for(lambda: (r := client.status(rid)).final and r, 60, 0.2, f"run {rid} to end")
        assert run.state == "succeeded", f"{write} at {point}: {run.state} ({run.reason}) {run.error}"
        assert "ResumeImpossible" not in world.logs() and "diverged" not in world.logs()
        n = executions(world, rid)
        assert n["peek:first"] == (1 if written else 2), n  # redone only if it was lost
        if write != "finish":
            assert n["peek:after"] == 1, n
        children = world.sql("SELECT count(*), min(state) FROM runs WHERE started_by = %s", rid)[0]
        assert children == ((1, "succeeded") if write == "child" else (0, None))
        ledger = world.sql("SELECT count(*), coalesce(sum(amount), 0) FROM ledger WHERE run_id = %s", rid)[0]
        spent = world.sql(
            "SELECT spent, reserved FROM budgets b JOIN runs r ON r.budget_id = b.budget_id WHERE r.id = %s",
            rid,
        )[0]
        assert ledger[0] == (1 if write == "reserve" else 0)
        assert (float(spent[0]), float(spent[1])) == (float(ledger[1]), 0.0)  # spent as in the world
        assert n.get("capped:x", 0) == (1 if write == "slot" else 0)


# The write made beside a held result: its kill point's KIND, and the held call's operation.
BESIDE = {
    "park": ("park", "op-2"),  # a rate's second call parks the run once the read is done
    "approval": ("wait", "op-1"),  # the approval's wait, once the read's result is held
    "child_wait": ("wait", "op-2"),  # the wait for a child no worker serves yet
    "cancel": ("cancel", "op-1"),  # the cancellation journaled at the crossing after a mark
    "in_doubt": ("in_doubt", "op-1"),  # a plain tool past its timeout, beside a read
}


def made(world: World, run_id: str, write: str) -> bool:
    """Whether the write under test is committed (read straight from Postgres)."""
    kinds = {k for _s, k, _op, _b in journal(world, run_id)}
    state, reason = world.sql("SELECT state, reason FROM runs WHERE id = %s", run_id)[0]
    return {
        "park": (state, reason) == ("waiting", "rate_limit"),
        "approval": state == "awaiting_approval",
        "child_wait": (state, reason) == ("waiting", "child"),
        "cancel": "cancel" in kinds,
        "in_doubt": "in_doubt" in kinds,
    }[write]


def settle_by_hand(client: Client, run_id: str, write: str) -> None:
    """What a person does for the run to go on: approve the approval, resolve the in-doubt."""
    if write == "approval":
        wait_for(lambda: client.status(run_id).state == "awaiting_approval", 60, 0.2, "the approval")
        client.approve(run_id, "op-2", approver="ops", comment="go", args_hash=args_hash({"what": "first"}))
    elif write == "in_doubt":

        def in_doubt() -> bool:
            run = client.status(run_id)
            return (run.state, run.reason) == ("waiting", "in_doubt")

        wait_for(in_doubt, 60, 0.2, "the in-doubt wait")
        client.resolve(run_id, "op-2", executed=True, result="late")


@pytest.mark.parametrize("point", ["with_result_held", "after_fenced_write"])
@pytest.mark.parametrize("write", list(BESIDE))
def test_killed_at_a_write_beside_a_held_result(world: World, write: str, point: str) -> None:
    kind, held_op = BESIDE[write]
    with held_world(world) as client:
        rid = client.enqueue("beside", {"write": write}, queue="q", budget={"usd": 10}).id
        armed = world.worker(APP, "--queue", "q", OUTLAST_FAILPOINTS=f"{point}:{kind}", **HOLD_LONG)
        if write == "cancel":
            wait_for(lambda: executions(world, rid).get("mark:first"), 30, 0.1, "the mark")
            client.cancel(rid)
        killed(armed)
        # The kill landed with the result held: not written before the write, written with it.
        after = point == "after_fenced_write"
        written = ("result", held_op) in {(k, op) for _s, k, op, _b in journal(world, rid)}
        assert (written, made(world, rid, write)) == (after, after), journal(world, rid)

        world.worker(APP, "--queue", "q", "--queue", "kids")
        settle_by_hand(client, rid, write)
        run = wait_for(lambda: (r := client.status(rid)).final and r, 60, 0.2, f"run {rid} to end")
        ends = "cancelled" if write == "cancel" else "succeeded"
        assert run.state == ends, f"{write} at {point}: {run.state} ({run.reason}) {run.error}"
        assert "ResumeImpossible" not in world.logs() and "diverged" not in world.logs()
        n = executions(world, rid)
        # Written, the held call is never made again; lost, it is made again (a read redone, an
        # idempotent call's gap dispatched with its key): at least once more (an attempt left on a
        # loaded machine redoes it too). Its effects in the world: once.
        first = n["mark:first" if write == "cancel" else "peek:first"]
        assert (first == 1) if written else (first >= 2), n
        if write == "cancel":  # ended at the next call: nothing after it
            assert "peek:after" not in n, n
            assert world.sql("SELECT count(*) FROM marks WHERE run_id = %s", rid)[0][0] == 1
        else:
            assert n["peek:after"] >= 1, n
        assert n.get("stuck", 0) == (1 if write == "in_doubt" else 0), n  # in doubt: never again
        children = world.sql("SELECT count(*), min(state) FROM runs WHERE started_by = %s", rid)[0]
        assert children == ((1, "succeeded") if write == "child_wait" else (0, None))
        rated = (n.get("rated:1", 0) > 0, n.get("rated:2", 0) > 0)  # its effects: the ledger's rows
        assert rated == ((True, True) if write == "park" else (False, False)), n
        ledger = world.sql("SELECT count(*), coalesce(sum(amount), 0) FROM ledger WHERE run_id = %s", rid)[0]
        spent = world.sql(
            "SELECT spent, reserved FROM budgets b JOIN runs r ON r.budget_id = b.budget_id WHERE r.id = %s",
            rid,
        )[0]
        assert ledger[0] == (2 if write == "park" else 0)
        assert (float(spent[0]), float(spent[1])) == (float(ledger[1]), 0.0)  # spent as in the world
