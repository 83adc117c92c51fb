"""The world of tests/integration/test_requests.py and tests/crash/test_requests_crash.py: a typed
request answered from outside, after the durable approval of a backlog draft (a proposal bound to
an operation id, a business decision, then the effect).

``backlog`` prepares the draft (a ``drafts`` row, bound once to its operation id), asks
``BusinessApprovalV1`` with an ``ApprovalTicket``, gets an ``ApprovalDecision`` back and, when it
approves, applies it: ``apply`` inserts the approved item and marks the draft completed in one
transaction; the item is unique per operation id (``ON CONFLICT DO NOTHING``), so a repeat
returns the same item id. ``applied`` counts every dispatch of ``apply`` (no uniqueness: a repeat
would show). A worker started with ``ASKING_DIE_IN_APPLY`` is killed inside the first ``apply``'s
transaction.
"""

from __future__ import annotations

import os
import signal
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from outlast import App
from tests.apps import connect, setup_tables

TABLES = """
CREATE TABLE IF NOT EXISTS drafts (operation_id text PRIMARY KEY, draft text NOT NULL,
    status text NOT NULL DEFAULT 'waiting');
CREATE TABLE IF NOT EXISTS items (id serial PRIMARY KEY, operation_id text UNIQUE NOT NULL,
    draft text NOT NULL, comment text NOT NULL);
CREATE TABLE IF NOT EXISTS applied (id serial PRIMARY KEY, operation_id text NOT NULL,
    at timestamptz NOT NULL DEFAULT clock_timestamp());
"""


def setup(database_url: str, schema: str) -> None:
    setup_tables(database_url, schema, TABLES)


class ApprovalTicket(BaseModel):
    operation_id: str
    draft: str


class ApprovalDecision(BaseModel):
    model_config = ConfigDict(extra="forbid")

    operation_id: str
    choice: Literal["approve", "reject"]
    comment: str = Field(min_length=1, max_length=500)


app = App()


@app.tool("prepare", idempotent=True)
def prepare(operation_id: str, draft: str) -> str:
    """The draft bound to its operation id, once: another draft under the same id is refused."""
    with connect() as c:
        c.execute("INSERT INTO drafts VALUES (%s, %s) ON CONFLICT DO NOTHING", (operation_id, draft))
        row = c.execute("SELECT draft FROM drafts WHERE operation_id = %s", (operation_id,)).fetchone()
    assert row is not None
    if row[0] != draft:
        raise ValueError(f"operation {operation_id} is bound to another draft")
    return operation_id


def _dying() -> bool:
    """The first ``apply`` of a worker started with ``ASKING_DIE_IN_APPLY`` dies inside its
    transaction (the insert made, the draft not yet completed)."""
    with connect() as c:
        return c.execute("SELECT count(*) FROM applied").fetchone() == (1,)


@app.tool("apply", idempotent=True)
def apply(operation_id: str, comment: str) -> int:
    """The approved item and the draft completed, in one transaction; a repeat finds the item."""
    with connect() as c:
        c.execute("INSERT INTO applied (operation_id) VALUES (%s)", (operation_id,))
        with c.transaction():
            c.execute(
                "INSERT INTO items (operation_id, draft, comment) SELECT operation_id, draft, %s "
                "FROM drafts WHERE operation_id = %s ON CONFLICT (operation_id) DO NOTHING",
                (comment, operation_id),
            )
            if os.environ.get("ASKING_DIE_IN_APPLY") and _dying():
                os.kill(os.getpid(), signal.SIGKILL)  # mid-transaction: a crash test's window
            c.execute("UPDATE drafts SET status = 'completed' WHERE operation_id = %s", (operation_id,))
        row = c.execute("SELECT id FROM items WHERE operation_id = %s", (operation_id,)).fetchone()
    assert row is not None
    return int(row[0])


@app.workflow("backlog")
async def backlog(
    run: Any,
    operation_id: str,
    draft: str,
    responders: list[str] | None = None,
    expires_in: float | None = None,
) -> dict[str, Any]:
    await run.call(prepare, operation_id, draft)
    decision = await run.request(
        "BusinessApprovalV1",
        ApprovalTicket(operation_id=operation_id, draft=draft),
        response=ApprovalDecision,
        responders=responders,
        expires_in=expires_in,
    )
    assert isinstance(decision, ApprovalDecision)
    if decision.operation_id != operation_id:
        raise ValueError(f"the decision is for operation {decision.operation_id}, not {operation_id}")
    item = await run.call(apply, operation_id, decision.comment) if decision.choice == "approve" else None
    return {
        "choice": decision.choice,
        "comment": decision.comment,
        "item": item,
        "type": type(decision).__name__,
    }


@app.workflow("count")
async def count(run: Any, n: int = 2) -> list[int]:
    """Asks for ``n`` numbers, one request after another (a list of ints each time)."""
    got = []
    for i in range(n):
        got.append(await run.request(f"number {i}", {"i": i}, response=int))
    return got


@app.workflow("race")
async def race(run: Any, seconds: float = 3600) -> dict[str, Any]:
    """The first of an answer (an int) and a timer; then a confirmation, so that the race is
    replayed from the journal before the run ends."""
    won = await run.first(run.request("go", {"q": "how many?"}, response=int), run.sleep(seconds))
    confirmed = await run.request("confirm", {"won": won.which}, response=bool)
    return {"which": won.which, "value": won.value, "confirmed": confirmed}


@app.workflow("nap")
async def nap(run: Any, seconds: float) -> str:
    await run.sleep(seconds)
    return "slept"


@app.workflow("child_or_approval")
async def child_or_approval(run: Any, seconds: float = 3600) -> dict[str, Any]:
    """The first of a child's result and an approval."""
    child = await run.start("nap", {"seconds": seconds})
    approval = run.approval("publish", {"text": "t"}, approvers=["ops"])
    which, value = await run.first(child.result(), approval)
    return {"which": which, "value": value if which == 0 else value.status}
