"""The app behind ``outlast demo`` makes a payment against a small bank that honours idempotency keys.

Worker processes load it as ``outlast.demo_app:app``. The bank is a few tables in Postgres, in a
schema of its own named after the outlast schema the worker serves (``<schema>_bank``):

- ``ledger``: one row per transfer, ``idempotency_key`` UNIQUE. A request that repeats a key moves
  no money: it gets the original receipt back (and the bank counts the repeat in ``requests``).
- ``outbox``: the notifications sent, keyed by idempotency key, which the reconciler looks up.
- ``audit``: plain log lines, a side effect that nobody can check or repeat safely.
"""

from __future__ import annotations

import functools
from typing import Any

import psycopg
from psycopg import sql

from outlast.action import NOT_EXECUTED, Action, current_action
from outlast.app import App
from outlast.services import resolve
from outlast.settings import Settings
from outlast.worker.run import Run

app = App()

_TABLES = """
CREATE TABLE {s}.ledger (
    id              serial PRIMARY KEY,
    idempotency_key text NOT NULL UNIQUE,
    amount          integer NOT NULL,
    to_account      text NOT NULL,
    requests        integer NOT NULL DEFAULT 1,
    at              timestamptz NOT NULL DEFAULT now());
CREATE TABLE {s}.outbox (
    idempotency_key text PRIMARY KEY,
    to_account      text NOT NULL,
    message         text NOT NULL,
    at              timestamptz NOT NULL DEFAULT now());
CREATE TABLE {s}.audit (
    id     serial PRIMARY KEY,
    run_id text NOT NULL,
    line   text NOT NULL,
    at     timestamptz NOT NULL DEFAULT now());
"""


def bank_schema(outlast_schema: str) -> str:
    """The bank's schema for an outlast schema: its own, beside it."""
    return f"{outlast_schema}_bank"


def reset_bank(database_url: str, schema: str) -> None:
    """Drop the bank and open it again, empty."""
    s = sql.Identifier(schema)
    with psycopg.connect(database_url, autocommit=True) as conn, conn.transaction():
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(s))
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(s))
        conn.execute(sql.SQL(_TABLES).format(s=s))


def ledger(database_url: str, schema: str, run_id: str) -> list[dict[str, Any]]:
    """The bank's own rows for a run's transfers (their keys start with the run id)."""
    query = sql.SQL(
        "SELECT id, idempotency_key, amount, to_account, requests FROM {}.ledger "
        "WHERE starts_with(idempotency_key, %s) ORDER BY id"
    ).format(sql.Identifier(schema))
    with psycopg.connect(database_url, autocommit=True) as conn:
        cur = conn.execute(query, (f"{run_id}:",))
        names = [c.name for c in cur.description or []]
        return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


@functools.cache
def _bank() -> tuple[str, str]:
    """Where the bank is: the Postgres this worker uses, the schema beside its own."""
    settings, _ = resolve(Settings.from_env())
    assert settings.database_url
    return settings.database_url, bank_schema(settings.schema)


def _execute(statement: str, *params: Any) -> tuple[Any, ...] | None:
    url, schema = _bank()
    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.execute(sql.SQL(statement).format(bank=sql.Identifier(schema)), params)
        return cur.fetchone() if cur.description else None


@app.tool("transfer", idempotent=True)
def transfer(amount: int, to: str) -> dict[str, Any]:
    """Move money. The bank honours idempotency keys: a repeated key moves nothing again."""
    key = current_action().idempotency_key
    repeat = "UPDATE {bank}.ledger SET requests = requests + 1 WHERE idempotency_key = %s RETURNING id"
    row = _execute(repeat, key) or _execute(
        "INSERT INTO {bank}.ledger AS l (idempotency_key, amount, to_account) VALUES (%s, %s, %s) "
        "ON CONFLICT (idempotency_key) DO UPDATE SET requests = l.requests + 1 RETURNING l.id",
        key,
        amount,
        to,
    )
    assert row is not None
    return {"receipt": f"R-{row[0]:04d}", "amount": amount, "to": to}


@app.tool("audit")
def audit(line: str) -> dict[str, Any]:
    """A plain side effect: nothing can tell whether it happened, nothing makes a repeat harmless."""
    _execute("INSERT INTO {bank}.audit (run_id, line) VALUES (%s, %s)", current_action().run_id, line)
    return {"logged": True}


@app.tool("notify")
def notify(to: str, message: str) -> dict[str, Any]:
    """Send a message (to the outbox). Not idempotent, but the outbox can be asked."""
    key = current_action().idempotency_key
    _execute(
        "INSERT INTO {bank}.outbox (idempotency_key, to_account, message) VALUES (%s, %s, %s)",
        key,
        to,
        message,
    )
    return {"sent": True}


@app.reconciler("notify")
def notify_sent(args: dict[str, Any], action: Action) -> Any:
    """Was the message sent? The outbox knows. (A failing lookup raises: never guess.)"""
    found = _execute("SELECT 1 FROM {bank}.outbox WHERE idempotency_key = %s", action.idempotency_key)
    return {"sent": True} if found else NOT_EXECUTED


@app.workflow("payments", version="1")
async def payments(run: Run, amount: int, to: str) -> dict[str, Any]:
    paid = await run.call("transfer", amount=amount, to=to)
    await run.call("audit", line=f"paid {amount} EUR to {to}, receipt {paid['receipt']}")
    await run.call("notify", to=to, message=f"You received {amount} EUR (receipt {paid['receipt']}).")
    return {"receipt": paid["receipt"], "amount": amount, "to": to, "notified": True}
