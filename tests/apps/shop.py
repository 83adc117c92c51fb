"""The example app of tests/integration/test_testing_kit.py (outlast.testing): an order is charged,
shipped a day later; a refund needs a person's approval within an hour.

The card processor's ledger is a table in the test's own schema (``charges``: one row per charge
actually made, no uniqueness, so a repeat would show), reached through ``OUTLAST_DATABASE_URL``
and ``OUTLAST_SCHEMA`` as a worker process gets them. ``charge`` is a plain tool whose
reconciler looks its idempotency key up in the ledger; ``ship`` calls a courier no test can
reach: tests replace it.
"""

from __future__ import annotations

from typing import Any

from outlast import NOT_EXECUTED, Action, App, current_action
from tests.apps import connect, setup_tables

app = App()

TABLES = """
CREATE TABLE IF NOT EXISTS charges (id serial PRIMARY KEY, run_id text NOT NULL, key text NOT NULL,
    amount integer NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp());
"""


def setup(database_url: str, schema: str) -> None:
    """Create the ledger in ``schema`` (idempotent)."""
    setup_tables(database_url, schema, TABLES)


@app.tool("charge")
def charge(amount: int) -> dict[str, Any]:
    a = current_action()
    with connect() as c:
        c.execute(
            "INSERT INTO charges (run_id, key, amount) VALUES (%s, %s, %s)",
            (a.run_id, a.idempotency_key, amount),
        )
    return {"charged": amount, "key": a.idempotency_key}


@app.reconciler("charge")
def charge_made(args: dict[str, Any], action: Action) -> Any:
    with connect() as c:
        row = c.execute("SELECT amount FROM charges WHERE key = %s", (action.idempotency_key,)).fetchone()
    return NOT_EXECUTED if row is None else {"charged": row[0], "key": action.idempotency_key}


@app.tool("ship")
def ship(item: str) -> str:
    raise ConnectionError("the courier's API cannot be reached from here")


@app.workflow("order")
async def order(run: Any, item: str, amount: int) -> dict[str, Any]:
    receipt = await run.call("charge", amount=amount)
    await run.sleep(24 * 3600)  # ship tomorrow
    tracking = await run.call("ship", item=item)
    return {"receipt": receipt, "tracking": tracking}


@app.workflow("refund")
async def refund(run: Any, order_id: str, amount: int) -> dict[str, Any]:
    decision = await run.approval(
        "refund", {"order_id": order_id, "amount": amount}, approvers=["ops"], expires_in=3600
    )
    return await run.call("charge", amount=-decision.args["amount"])
