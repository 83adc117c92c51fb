"""The crash tests' world: a small bank, a mailer's outbox and a wall of posts, in tables of the
test's own schema (the worker gets ``OUTLAST_DATABASE_URL`` and ``OUTLAST_SCHEMA``), and one tool of
each kind outlast distinguishes. Every dispatch is counted in ``calls`` so tests can tell a replay
(no call) from a redo (a call).

- ``balance``, ``lookup``, ``statement``: reads (``effect="read"``), redone freely;
- ``transfer``: idempotent, the bank honours idempotency keys (``bank.key`` is unique);
- ``notify``: a mailer that is *not* idempotent (a second send of one message raises), with a
  reconciler that asks the outbox whether the message went out;
- ``notify_flaky``: the same mailer, whose reconciler cannot tell (it raises);
- ``post``: a plain side effect, no promise, no reconciler.

``BANK_PACE`` (seconds, in the worker's env) makes every tool sleep a random part of it before and
after its effect, so that a random kill lands inside tools too.
"""

from __future__ import annotations

import os
import random
import time
from typing import Any

import psycopg

from outlast import NOT_EXECUTED, App, current_action
from outlast.action import Action
from tests.apps import connect, setup_tables

TABLES = """
CREATE TABLE IF NOT EXISTS calls (run_id text, tool text, n int NOT NULL, PRIMARY KEY (run_id, tool));
CREATE TABLE IF NOT EXISTS bank (id serial PRIMARY KEY, key text UNIQUE NOT NULL, run_id text NOT NULL,
    op_id text NOT NULL, amount int NOT NULL, dest text NOT NULL);
CREATE TABLE IF NOT EXISTS outbox (id serial PRIMARY KEY, message_id text UNIQUE NOT NULL,
    run_id text NOT NULL, op_id text NOT NULL, message text NOT NULL);
CREATE TABLE IF NOT EXISTS posts (id serial PRIMARY KEY, run_id text NOT NULL, op_id text NOT NULL,
    text text NOT NULL);
"""


def setup(database_url: str, schema: str) -> None:
    """Create the world's tables in ``schema`` (idempotent)."""
    setup_tables(database_url, schema, TABLES)


def _pace() -> None:
    pace = float(os.environ.get("BANK_PACE", "0"))
    if pace:
        time.sleep(random.uniform(0, pace / 2))


def _count(c: psycopg.Connection[Any], tool: str, run_id: str) -> None:
    c.execute(
        "INSERT INTO calls (run_id, tool, n) VALUES (%s, %s, 1) "
        "ON CONFLICT (run_id, tool) DO UPDATE SET n = calls.n + 1",
        (run_id, tool),
    )


def _read(tool: str) -> Any:
    a = current_action()
    with connect() as c:
        _count(c, tool, a.run_id)
        _pace()
        row = c.execute("SELECT count(*), coalesce(sum(amount), 0) FROM bank").fetchone()
        _pace()
    assert row is not None
    return {"transfers": row[0], "total": int(row[1])}


def _send(tool: str, msg: str) -> dict[str, Any]:
    a = current_action()
    with connect() as c:
        _count(c, tool, a.run_id)
        _pace()
        # A plain INSERT: this mailer is not idempotent, a second send of one message raises.
        row = c.execute(
            "INSERT INTO outbox (message_id, run_id, op_id, message) VALUES (%s, %s, %s, %s) RETURNING id",
            (a.idempotency_key, a.run_id, a.operation_id, msg),
        ).fetchone()
        _pace()
    assert row is not None
    return {"message_id": a.idempotency_key, "id": row[0]}


def _outbox_lookup(action: Action) -> Any:
    with connect() as c:
        _count(c, f"reconcile:{action.tool}", action.run_id)
        row = c.execute("SELECT id FROM outbox WHERE message_id = %s", (action.idempotency_key,)).fetchone()
    if row is None:
        return NOT_EXECUTED
    return {"message_id": action.idempotency_key, "id": row[0]}


def register_tools(app: App) -> None:
    """The same tools, for every version of the program."""

    @app.tool("balance", effect="read")
    def balance(account: str) -> dict[str, Any]:
        return {"account": account, **_read("balance")}

    @app.tool("lookup", effect="read")
    def lookup(ref: str) -> dict[str, Any]:
        return {"ref": ref, **_read("lookup")}

    @app.tool("statement", effect="read")
    def statement(account: str) -> dict[str, Any]:
        return {"account": account, **_read("statement")}

    @app.tool("transfer", idempotent=True)
    def transfer(amount: int, to: str) -> dict[str, Any]:
        a = current_action()
        with connect() as c:
            _count(c, "transfer", a.run_id)
            _pace()
            c.execute(
                "INSERT INTO bank (key, run_id, op_id, amount, dest) VALUES (%s, %s, %s, %s, %s) "
                "ON CONFLICT (key) DO NOTHING",
                (a.idempotency_key, a.run_id, a.operation_id, amount, to),
            )
            row = c.execute(
                "SELECT id, key, amount, dest FROM bank WHERE key = %s", (a.idempotency_key,)
            ).fetchone()
            _pace()
        assert row is not None
        return {"id": row[0], "key": row[1], "amount": row[2], "to": row[3]}

    @app.tool("notify")
    def notify(msg: str) -> dict[str, Any]:
        return _send("notify", msg)

    @app.reconciler("notify")
    def notify_sent(args: dict[str, Any], action: Action) -> Any:
        return _outbox_lookup(action)

    @app.tool("notify_flaky")
    def notify_flaky(msg: str) -> dict[str, Any]:
        return _send("notify_flaky", msg)

    @app.reconciler("notify_flaky")
    def notify_flaky_sent(args: dict[str, Any], action: Action) -> Any:
        with connect() as c:
            _count(c, "reconcile:notify_flaky", action.run_id)
        raise RuntimeError("mailer unreachable")

    @app.tool("post")
    def post(text: str) -> dict[str, Any]:
        a = current_action()
        with connect() as c:
            _count(c, "post", a.run_id)
            _pace()
            row = c.execute(
                "INSERT INTO posts (run_id, op_id, text) VALUES (%s, %s, %s) RETURNING id",
                (a.run_id, a.operation_id, text),
            ).fetchone()
            _pace()
        assert row is not None
        return {"post": row[0]}


app = App()
register_tools(app)


@app.workflow("step")
async def step(run: Any, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    """A read, the tool under test, a read: the crash matrix's workflow."""
    before = await run.call("balance", account="alice")
    done = await run.call(tool, **args)
    after = await run.call("balance", account="bob")
    return {"before": before, "done": done, "after": after}


@app.workflow("pay")
async def pay(run: Any, amount: int, to: str, variant: str = "") -> dict[str, Any]:
    """Version 1 of the payment; tests/apps/bank_v2.py holds its successors."""
    before = await run.call("balance", account=to)
    receipt = await run.call("transfer", amount=amount, to=to)
    sent = await run.call("notify", msg=f"sent {amount} to {to}")
    after = await run.call("balance", account=to)
    return {"before": before, "receipt": receipt, "sent": sent, "after": after}


@app.workflow("mixed")
async def mixed(run: Any, i: int) -> dict[str, Any]:
    """Ten operations of every kind but the unreliable reconciler (the randomized test)."""
    out: dict[str, Any] = {}
    out["balance"] = await run.call("balance", account=f"acct-{i}")
    out["t1"] = await run.call("transfer", amount=i + 1, to=f"acct-{i}")
    out["n1"] = await run.call("notify", msg=f"sent {i + 1} to acct-{i}")
    out["p1"] = await run.call("post", text=f"run {i}: first post")
    out["uuid"] = await run.uuid()
    out["lookup"] = await run.call("lookup", ref=f"ref-{i}")
    out["t2"] = await run.call("transfer", amount=100 + i, to=f"acct-{i}")
    out["n2"] = await run.call("notify", msg=f"sent {100 + i} to acct-{i}")
    out["p2"] = await run.call("post", text=f"run {i}: second post")
    out["statement"] = await run.call("statement", account=f"acct-{i}")
    return out
