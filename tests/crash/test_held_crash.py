"""Held results under real crashes: a worker process killed at each kind of fenced write a run
makes with a read's result held — before the write (``with_result_held:KIND``: the result dies
with its worker) and just after it (``after_fenced_write:KIND``: the write found the result
written first). A fresh worker takes the run over. Counted in the world: how many times the read
ran, the effects (children, ledger rows, capped dispatches), and the budget spent against the
ledger; and the run succeeds with no resume mismatch.

The armed workers hold results until the run's next write (``OUTLAST_HOLD_MS`` a minute), so
that what is held at the kill does not depend on timing.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from outlast import Client
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
