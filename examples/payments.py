"""Payments: a transfer that happens exactly once, even when the worker dies in the middle of it.

Run it from the repository root (with no OUTLAST_*_URL set, outlast starts its own private
Postgres and Redis in .outlast/; the bank below lives in that Postgres, in schema ``example_bank``):

    outlast migrate
    outlast worker examples.payments:app                    # one terminal
    outlast enqueue payments --input '{"amount": 120, "to": "alice"}' --wait    # another

To see a crash and a resume, start the worker armed to die right after the bank executed the
transfer, then start it again without the failpoint; the transfer is asked again with the same
idempotency key, and the bank's ledger still has one row for the run:

    OUTLAST_FAILPOINTS=after_effect:transfer outlast worker examples.payments:app
    outlast worker examples.payments:app
    psql "$OUTLAST_DATABASE_URL" -c 'select * from example_bank.ledger'

(With the embedded default, ``eval "$(outlast dev)"`` exports its URLs.)
"""

from __future__ import annotations

import functools
from typing import Any

import psycopg

from outlast import NOT_EXECUTED, Action, App, Run, Settings, current_action
from outlast.services import resolve

app = App()


@functools.cache
def bank_url() -> str:
    """The bank shares outlast's Postgres here, for the example's sake; its tables are its own."""
    settings, _ = resolve(Settings.from_env())
    assert settings.database_url
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA IF NOT EXISTS example_bank")
        conn.execute(
            "CREATE TABLE IF NOT EXISTS example_bank.ledger (id serial PRIMARY KEY,"
            " idempotency_key text NOT NULL UNIQUE, amount integer NOT NULL, to_account text NOT NULL,"
            " at timestamptz NOT NULL DEFAULT now())"
        )
        conn.execute(
            "CREATE TABLE IF NOT EXISTS example_bank.outbox (idempotency_key text PRIMARY KEY,"
            " to_account text NOT NULL, message text NOT NULL)"
        )
        conn.execute(
            "CREATE TABLE IF NOT EXISTS example_bank.audit (id serial PRIMARY KEY, run_id text, line text)"
        )
    return settings.database_url


def execute(statement: str, *params: Any) -> tuple[Any, ...] | None:
    with psycopg.connect(bank_url(), autocommit=True) as conn:
        cur = conn.execute(statement, params)
        return cur.fetchone() if cur.description else None


@app.tool("transfer", idempotent=True)
def transfer(amount: int, to: str) -> dict[str, Any]:
    """idempotent=True is our promise: the bank ignores a second request with the same key."""
    key = current_action().idempotency_key  # the same on every resume of this run
    execute(
        "INSERT INTO example_bank.ledger (idempotency_key, amount, to_account) VALUES (%s, %s, %s)"
        " ON CONFLICT (idempotency_key) DO NOTHING",
        key,
        amount,
        to,
    )
    row = execute("SELECT id FROM example_bank.ledger WHERE idempotency_key = %s", key)
    assert row is not None
    return {"receipt": f"R-{row[0]:04d}", "amount": amount, "to": to}


@app.tool("audit")
def audit(line: str) -> dict[str, Any]:
    """A plain side effect: if the worker dies while it runs, the run waits, in doubt, for a person
    (`outlast status RUN`, then `outlast resolve RUN OP --executed` or `--not-executed`)."""
    execute("INSERT INTO example_bank.audit (run_id, line) VALUES (%s, %s)", current_action().run_id, line)
    return {"logged": True}


@app.tool("notify")
def notify(to: str, message: str) -> dict[str, Any]:
    key = current_action().idempotency_key
    execute("INSERT INTO example_bank.outbox VALUES (%s, %s, %s)", key, to, message)
    return {"sent": True}


@app.reconciler("notify")
def notify_sent(args: dict[str, Any], action: Action) -> Any:
    """Asked after a crash: was it sent? The outbox knows. (If it cannot tell, this raises.)"""
    found = execute("SELECT 1 FROM example_bank.outbox WHERE idempotency_key = %s", action.idempotency_key)
    return {"sent": True} if found else NOT_EXECUTED


@app.workflow("payments", version="1")
async def payments(run: Run, amount: int, to: str) -> dict[str, Any]:
    paid = await run.call("transfer", amount=amount, to=to)
    await run.call("audit", line=f"paid {amount} EUR to {to}, receipt {paid['receipt']}")
    await run.call("notify", to=to, message=f"You received {amount} EUR (receipt {paid['receipt']}).")
    return {"receipt": paid["receipt"], "amount": amount, "to": to}
