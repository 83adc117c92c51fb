"""This module holds a paused run where it stops. An operator's pause (``outlast pause``: a run, a
workflow or a queue) reaches a held run at its claim (``Claimed.paused``) or at a heartbeat
(``RunControl.pause``); the run stops at its claim or at its next crossing (``Paused``), once the
calls under way have settled and been journaled, and waits, reason ``paused``, holding no worker,
until ``outlast unpause`` queues it again. A pause lifted before the run stopped queues it at
once."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import structlog

from outlast.errors import Fenced, ServiceUnavailable
from outlast.store.pauses import Pauses
from outlast.worker.control import Interrupted, Paused, RunControl
from outlast.worker.executor import Execution, Outcome
from outlast.worker.writes import JournalWrites

log = structlog.get_logger("outlast.worker")
REASON = "paused"


def said(run_id: str, pauses: list[dict[str, Any]] | None) -> str:
    """The paused run's message: who paused it and why, and the way out."""
    if not pauses:
        return f"run '{run_id}': paused by an operator; to let it go on: outlast unpause {run_id}"
    p = pauses[0]
    by = p.get("by", {}).get("principal", "?")
    scope = "" if p["scope"] == "run" else f" (every run of {p['scope']} '{p['target']}')"
    how = "" if p["scope"] == "run" else f" --{p['scope']}"
    return (
        f"run '{run_id}': paused by {by}{scope}: {p.get('why') or 'no reason given'}; to let it "
        f"go on: outlast unpause{how} {p['target']}"
    )


async def executed(
    pauses: Pauses, ex: Execution, paused: list[dict[str, Any]] | None, db_now: datetime
) -> Outcome:
    """The run executed; or parked at its claim, not started, if a pause holds it (a cancellation
    goes first), else at the crossing where a pause reached it."""
    if not paused or ex.control.cancel.is_set():
        try:
            return await ex.execute()
        except Paused:
            paused = None  # read as it parks
    try:
        ex.wake_at = await park(pauses, ex.writes, ex.control, paused, db_now)
    except Fenced:
        return Outcome.FENCED
    except Interrupted as exc:
        raise ServiceUnavailable(str(exc)) from exc
    return Outcome.WAITING


async def park(
    family: Pauses,
    writes: JournalWrites,
    control: RunControl,
    pauses: list[dict[str, Any]] | None,
    db_now: datetime | None,
) -> datetime | None:
    """Park the held run while a pause holds it (its held entries written first); ``pauses``: as
    its claim saw them (None: read now). Returns when to publish it again: ``db_now`` if the pause
    was lifted meanwhile (it is queued), else None."""
    run_id = control.run_id
    if pauses is None:
        pauses = await control.db(family.pause_of(run_id))
    message = said(run_id, pauses)
    state = await control.db(writes.fenced("wait", family.park_paused(run_id, control.token, message)))
    if state is None:
        raise Fenced(run_id, control.token)
    log.warning("run.paused", run_id=run_id, message=message, state=state)
    return db_now if state == "queued" else None
