"""The world of tests/integration/test_waiting.py and tests/crash/test_waiting_crash.py: approvals,
timers, deadlines, budgets, cancellation, compensation and policy.

Every tool's effect lands in tables of the test's own schema (the worker gets
``OUTLAST_DATABASE_URL`` and ``OUTLAST_SCHEMA``), stamped with the database clock, so tests count
what really happened and when:

- ``effects``: one row per dispatch of a tool (no uniqueness: a repeat would show);
- ``undone``: one row per compensation that ran (a failing compensation writes nothing);
- ``gates``: switches the tests flip (``frozen:TOOL`` makes the policy refuse TOOL; ``open:NAME``
  lets ``hold(gate=NAME)`` return);
- ``started``: a row when ``hold`` begins, so a test knows the call is in flight.

``app_v2`` is the next version of the program: its ``approve_publish`` asks approval for other
arguments than version 1 did (replay of a v1 run must be refused).
"""

from __future__ import annotations

import asyncio
import time
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

from outlast import App, InDoubt, current_action
from outlast.errors import ApprovalRejected
from tests.apps import connect, setup_tables

TABLES = """
CREATE TABLE IF NOT EXISTS effects (id serial PRIMARY KEY, run_id text NOT NULL, op_id text NOT NULL,
    key text NOT NULL, tool text NOT NULL, args jsonb NOT NULL,
    at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE TABLE IF NOT EXISTS undone (id serial PRIMARY KEY, run_id text NOT NULL, op_id text NOT NULL,
    tool text NOT NULL, args jsonb NOT NULL, result jsonb,
    at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE TABLE IF NOT EXISTS gates (name text PRIMARY KEY);
CREATE TABLE IF NOT EXISTS started (id serial PRIMARY KEY, run_id text NOT NULL, op_id text NOT NULL,
    at timestamptz NOT NULL DEFAULT clock_timestamp());
"""


def setup(database_url: str, schema: str) -> None:
    """Create the world's tables in ``schema`` (idempotent)."""
    setup_tables(database_url, schema, TABLES)


def _effect(tool: str, args: dict[str, Any]) -> dict[str, Any]:
    a = current_action()
    with connect() as c:
        row = c.execute(
            "INSERT INTO effects (run_id, op_id, key, tool, args) VALUES (%s, %s, %s, %s, %s) "
            "RETURNING id, at",
            (a.run_id, a.operation_id, a.idempotency_key, tool, Jsonb(args)),
        ).fetchone()
    assert row is not None
    return {"id": row[0], "at": row[1].isoformat(), "op": a.operation_id}


def gate(name: str) -> bool:
    with connect() as c:
        return c.execute("SELECT 1 FROM gates WHERE name = %s", (name,)).fetchone() is not None


def register(app: App) -> None:
    """The same tools, compensations and policy for every version of the program."""
    _effects(app)
    _holds_and_bookings(app)

    @app.policy
    def policy(action: str, args: dict[str, Any], run: Any) -> Any:
        if action == "transfer" and run.in_doubt("transfer"):
            return "a transfer is in doubt: resolve it before any other transfer"
        if gate(f"frozen:{action}"):
            return f"{action} is frozen"
        return None


def _effects(app: App) -> None:

    @app.tool("publish")
    def publish(text: str) -> dict[str, Any]:
        return _effect("publish", {"text": text})

    @app.tool("transfer")  # a plain side effect: no idempotency promise, no reconciler
    def transfer(amount: int, to: str) -> dict[str, Any]:
        return _effect("transfer", {"amount": amount, "to": to})

    @app.tool("spend", cost={"usd": 1})
    async def spend(n: int) -> dict[str, Any]:
        await asyncio.sleep(0.05)  # keep the dispatches of a fan-out overlapping
        return await asyncio.to_thread(_effect, "spend", {"n": n})

    @app.tool("priced", cost={"usd": 1, "calls": 1})
    def priced(actual: float) -> dict[str, Any]:
        current_action().charge(usd=actual)  # the actual usd replaces the estimate
        return _effect("priced", {"actual": actual})


def _holds_and_bookings(app: App) -> None:

    @app.tool("hold")
    def hold(gate_name: str, limit: float = 10.0) -> dict[str, Any]:
        """In flight until the test opens ``open:<gate_name>``."""
        return _hold("hold", gate_name, limit)

    @app.tool("hold_paid", cost={"usd": 2})
    def hold_paid(gate_name: str, limit: float = 10.0) -> dict[str, Any]:
        return _hold("hold_paid", gate_name, limit)

    def _hold(tool: str, gate_name: str, limit: float) -> dict[str, Any]:
        a = current_action()
        with connect() as c:
            c.execute("INSERT INTO started (run_id, op_id) VALUES (%s, %s)", (a.run_id, a.operation_id))
        until = time.monotonic() + limit
        while not gate(f"open:{gate_name}"):
            if time.monotonic() > until:
                raise TimeoutError(f"gate {gate_name} never opened")
            time.sleep(0.05)
        return _effect(tool, {"gate_name": gate_name})

    @app.tool("book")
    def book(item: str) -> dict[str, Any]:
        return _effect("book", {"item": item})

    @app.compensation("book")
    def unbook(args: dict[str, Any], result: Any) -> dict[str, Any]:
        a = current_action()
        if args["item"].startswith("stuck"):
            raise RuntimeError(f"{args['item']} cannot be released")
        with connect() as c:
            c.execute(
                "INSERT INTO undone (run_id, op_id, tool, args, result) VALUES (%s, %s, 'book', %s, %s)",
                (a.run_id, a.operation_id, Jsonb(args), Jsonb(result)),
            )
        return {"released": args["item"]}


app = App()
register(app)


@app.workflow("approve_publish")
async def approve_publish(
    run: Any, text: str, approvers: list[str] | None = None, expires_in: float | None = None
) -> dict[str, Any]:
    """Ask for approval of publishing ``text``; a revision asks again with the new text."""
    args = {"text": text}
    decisions = []
    while True:
        d = await run.approval(
            "publish", args, approvers=approvers or ["ops"], expires_in=expires_in, policy_version="p1"
        )
        decisions.append({"id": d.approval_id, "status": d.status, "by": d.approver, "args": d.args})
        if d.status == "approved":
            break
        args = d.args  # revised: acting on the new args needs an approval of their own
    done = await run.call("publish", **args)
    return {"decisions": decisions, "published": done}


@app.workflow("approve_or_fallback")
async def approve_or_fallback(run: Any, text: str) -> dict[str, Any]:
    """A workflow that handles a rejection and goes on."""
    try:
        await run.approval("publish", {"text": text}, approvers=["ops"])
    except ApprovalRejected as exc:
        done = await run.call("publish", text=f"fallback after: {exc}")
        return {"fallback": done}
    return {"published": await run.call("publish", text=text)}


@app.workflow("nap")
async def nap(run: Any, seconds: float = 0.0, until: str = "") -> dict[str, Any]:
    if until:
        await run.sleep_until(datetime.fromisoformat(until))
    else:
        await run.sleep(seconds)
    return {"woke": await run.call("publish", text="woke")}


@app.workflow("held")
async def held(run: Any, gate_name: str, then: str = "after", paid: bool = False) -> dict[str, Any]:
    """A call held in flight by the test, then another crossing."""
    first = await run.call("hold_paid" if paid else "hold", gate_name=gate_name)
    second = await run.call("publish", text=then)
    return {"first": first, "second": second}


@app.workflow("ask_while_working")
async def ask_while_working(run: Any, gate_name: str, wait: str = "approval") -> dict[str, Any]:
    """A call in flight in parallel with a durable wait (an approval, or a timer)."""
    working = run.call("hold", gate_name=gate_name)
    if wait == "approval":
        asked = run.approval("publish", {"text": "in parallel"}, approvers=["ops"])
    else:
        asked = run.sleep(0.2)
    work, _ = await asyncio.gather(working, asked)
    return {"work": work, "published": await run.call("publish", text="in parallel")}


@app.workflow("calls_in_turn_beside_a_wait")
async def calls_in_turn_beside_a_wait(run: Any, gate_name: str, wait: str = "timer") -> dict[str, Any]:
    """One branch of a gather makes a call, then another (held in flight by the test), while the
    other branch waits durably (a timer, or an approval)."""
    if wait == "approval":
        asked = run.approval("publish", {"text": "in turn"}, approvers=["ops"])
    else:
        asked = run.sleep(0.2)

    async def in_turn() -> Any:
        await run.call("publish", text="first")
        return await run.call("hold", gate_name=gate_name)

    work, _ = await asyncio.gather(in_turn(), asked)
    return {"work": work}


@app.workflow("fan")
async def fan(run: Any, n: int, plain: bool = False) -> dict[str, Any]:
    """``n`` parallel dispatches of ``spend`` (cost usd 1 each)."""
    calls = [run.call("spend", n=i) for i in range(n)]
    if plain:
        done = await asyncio.gather(*calls)
        return {"spent": len(done)}
    got = await asyncio.gather(*calls, return_exceptions=True)
    for g in got:
        if isinstance(g, BaseException):
            raise g
    return {"spent": len(got)}


@app.workflow("spend_seq")
async def spend_seq(run: Any, n: int) -> dict[str, Any]:
    for i in range(n):
        await run.call("spend", n=i)
    return {"spent": n}


@app.workflow("priced_once")
async def priced_once(run: Any, actual: float) -> dict[str, Any]:
    return await run.call("priced", actual=actual)  # type: ignore[no-any-return]


@app.workflow("trip", compensate_on=("cancel", "failure"), fails_on=(ValueError,))
async def trip(run: Any, items: list[str], hold_gate: str = "", fail: bool = False) -> dict[str, Any]:
    """Book every item; optionally hold a call in flight; optionally fail."""
    booked = [await run.call("book", item=i) for i in items]
    if hold_gate:
        await run.call("hold", gate_name=hold_gate)
        await run.call("publish", text="trip confirmed")
    if fail:
        raise ValueError("the trip broke on purpose")
    return {"booked": booked}


@app.workflow("trip_on_failure", compensate_on=("failure",), fails_on=(ValueError,))
async def trip_on_failure(run: Any, items: list[str], hold_gate: str = "") -> dict[str, Any]:
    """Compensates when it fails, not when it is cancelled."""
    for i in items:
        await run.call("book", item=i)
    if hold_gate:
        await run.call("hold", gate_name=hold_gate)
        await run.call("publish", text="never")
    raise ValueError("no seat left")


@app.workflow("transfers")
async def transfers(run: Any, amount: int, to: str) -> dict[str, Any]:
    """Seed 000: once a transfer is in doubt, the policy refuses any further transfer."""
    try:
        first = await run.call("transfer", amount=amount, to=to)
    except InDoubt:
        first = None
    second = await run.call("transfer", amount=amount, to=to)
    return {"first": first, "second": second}


app_v2 = App()
register(app_v2)


@app_v2.workflow("approve_publish")
async def approve_publish_v2(
    run: Any, text: str, approvers: list[str] | None = None, expires_in: float | None = None
) -> dict[str, Any]:
    """Version 2 asks approval for the text with a signature: other arguments than version 1."""
    args = {"text": f"{text} -- the team"}
    d = await run.approval("publish", args, approvers=approvers or ["ops"], expires_in=expires_in)
    return {"published": await run.call("publish", **d.args)}
