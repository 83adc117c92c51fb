"""A cancellation that outlives a hung sync tool (real Redis and Postgres): the run ends
``cancelled`` within a heartbeat of the grace, the tool's thread is abandoned and its late result
refused; the operation is journaled in doubt (a plain or reconciled tool) or ``abandoned`` (a
read, an idempotent tool: no result), and a run taken over after that entry never dispatches it
again. A tool that returns within the grace keeps its result: tests/integration/test_waiting.py
(``test_cancel_during_an_in_flight_call``)."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from outlast import App, Client, Retry
from outlast.producer import AsyncClient
from outlast.store import Store
from outlast.testing.worker import InProcessWorker
from outlast.worker.control import HandOver, RunControl
from outlast.worker.executor import Execution, Outcome
from outlast.worker.gaps import GapTable
from outlast.worker.scope import take
from outlast.worker.threads import TOOL_THREADS
from tests.conftest import World, wait_for
from tests.crash import journal

app = App()
release = threading.Event()
calls: list[str] = []  # every call of a hanging tool, by tool name


def hang(tool: str) -> str:
    calls.append(tool)
    release.wait(120)
    return f"{tool} returned late"


@app.tool("hang_plain")
def hang_plain() -> str:
    return hang("hang_plain")


@app.tool("hang_reconciled")
def hang_reconciled() -> str:
    return hang("hang_reconciled")


@app.reconciler("hang_reconciled")
def ask(args: dict[str, Any], action: Any) -> str:
    return "it happened"


@app.tool("hang_read", effect="read")
def hang_read() -> str:
    return hang("hang_read")


@app.tool("hang_idempotent", idempotent=True, retry=Retry(attempts=3, on=(BaseException,)))
def hang_idempotent() -> str:
    return hang("hang_idempotent")


@app.workflow("hangs")
async def hangs(run: Any, tool: str) -> str:
    result: str = await run.call(tool)
    return result


def op_kinds(world: World, run_id: str) -> list[str]:
    return [kind for _seq, kind, op, _body in journal(world, run_id) if op == "op-1"]


@pytest.mark.parametrize(
    ("tool", "journaled"),
    [
        ("hang_plain", ["intention", "in_doubt", "cancel"]),
        ("hang_reconciled", ["intention", "in_doubt", "cancel"]),
        ("hang_read", ["abandoned", "cancel"]),  # a read journals no intention: this says what it asked
        # its Retry (on any exception) does not take the abandon for a failure to try again
        ("hang_idempotent", ["intention", "abandoned", "cancel"]),
    ],
)
def test_a_cancel_while_a_sync_tool_hangs_ends_the_run_and_refuses_the_late_result(
    world: World, tool: str, journaled: list[str]
) -> None:
    release.clear()
    calls.clear()
    worker = InProcessWorker(app, world.settings(), ["default"])
    worker.start()
    try:
        with Client(settings=world.settings()) as c:
            rid = c.enqueue("hangs", {"tool": tool}).id
            wait_for(lambda: calls == [tool], 30, what="the tool to hang")
            c.cancel(rid)
            # Seen within a heartbeat, abandoned a heartbeat later (TTL/3 = 0.7 s each, in fact);
            # the tool would hang for two minutes.
            done = c.wait(rid, timeout=20)
            assert (done.state, done.reason) == ("cancelled", "cancelled on request")
            kinds = op_kinds(world, rid)
            assert kinds == journaled
            busy = TOOL_THREADS.busy
            release.set()  # the abandoned thread returns: its result is refused
            wait_for(lambda: TOOL_THREADS.busy < busy, 30, what="the abandoned thread to return")
            time.sleep(0.3)
            assert op_kinds(world, rid) == kinds
            assert c.status(rid).state == "cancelled"
            assert calls == [tool]  # dispatched once, never again by the run
    finally:
        release.set()
        worker.stop()


async def test_a_run_taken_over_after_an_abandoned_read_never_dispatches_it_again(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker goes away right after journaling ``abandoned`` (before the cancellation): the
    next owner replays the operation as abandoned, journals the cancellation, and ends the run."""
    release.clear()
    calls.clear()
    store = Store(world.database_url, world.schema)
    await store.open()
    await store.runs.insert_run(
        id="r",
        workflow="hangs",
        queue="default",
        input={"tool": "hang_read"},
        input_hash="h",
        program=None,
        deadline_in=None,
    )

    async def gone(self: GapTable, op_id: str) -> None:
        raise HandOver()  # as a worker stopping between the two entries

    try:
        got = await store.leases.claim("r", "w1", 30, app.programs())
        assert got is not None
        run = got[0]
        control = RunControl(run_id=run.id, token=run.fencing_token, ttl=3.0, sent_at=time.monotonic())
        first = asyncio.create_task(
            Execution(
                run=run, app=app, store=store, taken=take(run=run, app=app, store=store, control=control)
            ).execute()
        )
        await asyncio.to_thread(wait_for, lambda: calls == ["hang_read"], 30, what="the read to hang")
        async with AsyncClient(settings=world.settings()) as client:
            await client.cancel("r")
        monkeypatch.setattr(GapTable, "cancelled_again", gone)
        control.cancelled()  # as the heartbeat does when it sees the request
        with pytest.raises(HandOver):
            await first
        monkeypatch.undo()
        assert op_kinds(world, "r") == ["abandoned"]
        release.set()  # a re-dispatch would return at once: it must not happen
        assert await store.leases.release("r", run.fencing_token, "test")

        got = await store.leases.claim("r", "w2", 30, app.programs())
        assert got is not None and got[0].cancel_requested
        assert await Execution(run=got[0], app=app, store=store).execute() == Outcome.FINAL
        done = await store.runs.get_run("r")
        assert done is not None and done.state == "cancelled"
        assert op_kinds(world, "r") == ["abandoned", "cancel"]
        assert calls == ["hang_read"]
    finally:
        release.set()
        await store.close()
