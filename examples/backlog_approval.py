"""Backlog approval: a decision bound to an immutable draft, and an effect that happens once.

Seed 004. A ``BacklogDraft`` is bound at the start to an operation id (its JSON and hash, in
``backlog_approvals``; the id cannot be reused for another draft). The product owner approves or
rejects that exact draft (by its args hash) with a comment of 1 to 500 characters. Approved, the
effect inserts one row in ``approved_backlog_items`` under the UNIQUE operation id and marks the
approval completed, in ONE transaction; run again (after a crash), it inserts nothing and returns
the same item id. Rejected, the run ends ``failed`` and no row is made. The four interruption
windows (after the wait is published, after the decision, inside the transaction, after the
commit) are each tested in tests/integration/test_examples.py.

Run it from the repository root (no OUTLAST_*_URL set: the embedded default in .outlast/):

    python -m examples.backlog_approval            # approve; or: ... backlog_approval reject

or by hand: ``outlast worker examples.backlog_approval:app``, ``outlast enqueue backlog_approval
--input '{"draft": {"title": "...", "region": "...", "items": ["..."]}}'``, then ``outlast approve
RUN op-3 --as product --comment "External business decision." --yes-i-saw`` (shows the action and
asks; or ``--args-hash H`` from ``outlast status RUN``). Tables: ``<OUTLAST_SCHEMA>_backlog``.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import signal
import sys
from typing import Any

import psycopg
import pydantic

from examples import own_tables
from outlast import App, Retry, Run
from outlast.errors import ApprovalRejected

app = App()

_TABLES = """
CREATE SCHEMA IF NOT EXISTS {s};
CREATE TABLE IF NOT EXISTS {s}.backlog_approvals (
    operation_id text PRIMARY KEY, draft text NOT NULL, draft_sha256 text NOT NULL,
    status text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'completed', 'rejected')),
    decided_by text, comment text);
CREATE TABLE IF NOT EXISTS {s}.approved_backlog_items (
    item_id serial PRIMARY KEY, operation_id text NOT NULL UNIQUE, draft text NOT NULL,
    created timestamptz NOT NULL DEFAULT now());
"""


class BacklogDraft(pydantic.BaseModel):
    """A proposal for the backlog: frozen, identified by the hash of its canonical JSON."""

    model_config = pydantic.ConfigDict(frozen=True, extra="forbid")
    title: str
    region: str
    items: tuple[str, ...]

    def json_text(self) -> str:
        return json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))


def tables_schema(outlast_schema: str) -> str:
    return f"{outlast_schema}_backlog"


@functools.cache
def _where() -> tuple[str, str]:
    return own_tables(tables_schema, _TABLES)


def connect() -> psycopg.Connection[tuple[Any, ...]]:
    url, schema = _where()
    return psycopg.connect(url, autocommit=True, options=f"-c search_path={schema}")


@app.tool("bind_draft", idempotent=True)
def bind_draft(operation_id: str, draft: str) -> str:
    """Bind the draft to the operation id, once and for good; returns the draft's hash."""
    sha = hashlib.sha256(draft.encode()).hexdigest()
    with connect() as conn:
        conn.execute(
            "INSERT INTO backlog_approvals (operation_id, draft, draft_sha256) VALUES (%s, %s, %s)"
            " ON CONFLICT DO NOTHING",
            (operation_id, draft, sha),
        )
        row = conn.execute(
            "SELECT draft_sha256 FROM backlog_approvals WHERE operation_id = %s", (operation_id,)
        )
        if row.fetchone() != (sha,):
            raise ValueError(
                f"operation {operation_id} is bound to another draft; a new draft needs a new id"
            )
    return sha


_failed_once = False


def _interrupt_inside_transaction() -> None:
    """For the tests: BACKLOG_FAIL_IN_TRANSACTION=crash kills the worker (a power cut), =raise
    loses the connection once (the tool's Retry calls it again); both inside the transaction."""
    global _failed_once
    how = os.environ.get("BACKLOG_FAIL_IN_TRANSACTION")
    if how == "crash":
        os.kill(os.getpid(), signal.SIGKILL)
    if how == "raise" and not _failed_once:
        _failed_once = True
        print("backlog: connection lost inside apply_backlog's transaction", file=sys.stderr)
        raise ConnectionError("connection lost inside the transaction")


@app.tool("apply_backlog", idempotent=True, retry=Retry(attempts=3, on=(ConnectionError,)))
def apply_backlog(operation_id: str, draft_sha256: str, approved_by: str, comment: str) -> dict[str, Any]:
    """The effect: one row under the UNIQUE operation id and the approval completed, in ONE
    transaction. Run again, it inserts nothing and returns the same item id."""
    with connect() as conn, conn.transaction():
        conn.execute(
            "INSERT INTO approved_backlog_items (operation_id, draft) SELECT operation_id, draft"
            " FROM backlog_approvals WHERE operation_id = %s AND draft_sha256 = %s AND status <> 'rejected'"
            " ON CONFLICT (operation_id) DO NOTHING",
            (operation_id, draft_sha256),
        )
        conn.execute(
            "UPDATE backlog_approvals SET status = 'completed', decided_by = %s, comment = %s"
            " WHERE operation_id = %s AND status = 'pending'",
            (approved_by, comment, operation_id),
        )
        _interrupt_inside_transaction()
        item = conn.execute(
            "SELECT item_id, created FROM approved_backlog_items WHERE operation_id = %s", (operation_id,)
        ).fetchone()
        if item is None:
            raise ValueError(f"no approved draft {draft_sha256[:12]} for operation {operation_id}")
    return {"item_id": item[0], "operation_id": operation_id, "created": item[1].isoformat()}


@app.tool("reject_backlog", idempotent=True)
def reject_backlog(operation_id: str, why: str) -> None:
    with connect() as conn:
        conn.execute(
            "UPDATE backlog_approvals SET status = 'rejected', comment = %s"
            " WHERE operation_id = %s AND status = 'pending'",
            (why, operation_id),
        )


@app.workflow("backlog_approval", version="1")
async def backlog_approval(
    run: Run, draft: dict[str, Any], operation_id: str | None = None
) -> dict[str, Any]:
    proposal = BacklogDraft.model_validate(draft)
    op = operation_id or f"backlog-{await run.uuid()}"  # made once, at the start, and journaled
    sha = await run.call("bind_draft", operation_id=op, draft=proposal.json_text())
    action = {"operation_id": op, "draft": proposal.model_dump(mode="json"), "draft_sha256": sha}
    try:
        decision = await run.approval("apply_backlog", action, approvers=["product"])
    except ApprovalRejected as exc:
        await run.call("reject_backlog", operation_id=op, why=str(exc))
        raise  # the run ends failed; no row
    if not decision.approved:
        raise ValueError("a backlog draft is approved or rejected, not revised")
    return await run.call(
        "apply_backlog",
        operation_id=op,
        draft_sha256=sha,
        approved_by=decision.approver,
        comment=decision.comment,
    )


def main(verdict: str = "approve") -> None:
    from examples import local_worker, pending_approval

    draft = {"title": "Regional pilot", "region": "Lyon", "items": ["onboard 3 stores", "weekly review"]}
    with local_worker("examples.backlog_approval:app") as client:
        run = client.enqueue("backlog_approval", {"draft": draft})
        ask = pending_approval(client, run.id)
        print(f"run {run.id} awaits a decision on {ask['args']['operation_id']} ({ask['args_hash'][:12]})")
        decide = client.approve if verdict == "approve" else client.reject
        how = {"approver": "product", "comment": "External business decision.", "args_hash": ask["args_hash"]}
        decide(run.id, ask["op_id"], **how)
        decide(run.id, ask["op_id"], **how)  # the same decision again: accepted, changes nothing
        done = client.wait(run.id, timeout=60)
        print(f"run {run.id} {done.state}: {done.result or (done.error or {}).get('message')}")
        with connect() as conn:  # the business table, read on its own
            rows = conn.execute(
                "SELECT item_id, operation_id, created FROM approved_backlog_items WHERE operation_id = %s",
                (ask["args"]["operation_id"],),
            ).fetchall()
        for item_id, op, created in rows or [("-", "(no row)", "")]:
            print(f"approved_backlog_items: item {item_id}  {op}  {created}")


if __name__ == "__main__":
    main(*sys.argv[1:2])
