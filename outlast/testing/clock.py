"""Time in tests: every durable wait no worker holds comes nearer by moving what is stored (the
runs' due times, pending approvals' expiries, deadlines, and the timers' journal entries, whose
chain is then re-hashed). The clock itself never moves: outlast reads it from Postgres."""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from outlast.journal import Entry, canonical, chain, first_bad_crossing

Conn = psycopg.Connection[tuple[Any, ...]]


def move_due_times(conn: Conn, seconds: float) -> list[str]:
    """In one transaction on ``conn`` (on the harness's schema), move every due time of the runs
    no worker holds ``seconds`` earlier and record an ``advanced`` event on each run moved;
    return their ids."""
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not 0 < seconds < math.inf:
        raise ValueError(f"advance() takes a positive, finite number of seconds, got {seconds!r}")
    shift = timedelta(seconds=seconds)
    detail = {
        "seconds": seconds,
        "message": f"outlast.testing moved this run's timers, approval expiry, start and deadline "
        f"{seconds:g}s earlier (the clock did not move)",
    }
    with conn.transaction():
        now: datetime = _one(conn.execute("SELECT now()"))
        ids = [r[0] for r in conn.execute(_UNHELD)]
        if not ids:
            return []
        moved = {run_id for run_id in ids if _move_timers(conn, run_id, shift, now)}
        moved |= {r[0] for r in conn.execute(_MOVE_RUNS, {"ids": ids, "shift": shift})}
        moved |= {r[0] for r in conn.execute(_MOVE_APPROVALS, {"ids": ids, "shift": shift})}
        for run_id in sorted(moved):
            conn.execute(
                "INSERT INTO events (run_id, kind, detail) VALUES (%s, 'advanced', %s)",
                (run_id, Jsonb(detail)),
            )
    return sorted(moved)


# Every unfinished run no worker holds, locked in id order (the order every outlast write keeps).
_UNHELD = b"""
SELECT id FROM runs WHERE state IN ('queued', 'waiting', 'awaiting_approval') ORDER BY id FOR UPDATE
"""

# published_at moves with wake_at and start_at: the sweeper wakes a wait once due and not
# published since, and reads a delayed run from its start.
_MOVE_RUNS = b"""
UPDATE runs SET wake_at = wake_at - %(shift)s, deadline = deadline - %(shift)s,
    start_at = start_at - %(shift)s,
    published_at = CASE WHEN wake_at IS NULL AND start_at IS NULL THEN published_at
                        ELSE published_at - %(shift)s END,
    updated_at = now()
WHERE id = ANY(%(ids)s) AND (wake_at IS NOT NULL OR deadline IS NOT NULL OR start_at IS NOT NULL)
RETURNING id
"""

_MOVE_APPROVALS = b"""
UPDATE approvals SET expires_at = expires_at - %(shift)s
WHERE run_id = ANY(%(ids)s) AND status = 'pending' AND expires_at IS NOT NULL
RETURNING run_id
"""


def _move_timers(conn: Conn, run_id: str, shift: timedelta, now: datetime) -> bool:
    """Move the run's pending timers (journal entries ``timer``) ``shift`` earlier and re-hash the
    chain from the first one moved. A journal that does not verify is left alone: the engine
    refuses it on resume, as it should."""
    rows = conn.execute(
        "SELECT seq, kind, op_id, body, hash FROM journal WHERE run_id = %s ORDER BY seq", (run_id,)
    ).fetchall()
    entries = [Entry(*row) for row in rows]
    head = _one(conn.execute("SELECT journal_head FROM runs WHERE id = %s", (run_id,)))
    if not entries or first_bad_crossing(entries, head) is not None:
        return False
    prev, changed = "", False
    for e in entries:
        body = e.body
        if e.kind == "timer":
            until = datetime.fromisoformat(e.data["until"])
            if until.tzinfo is not None and until > now:
                body = canonical({**e.data, "until": (until - shift).isoformat()})
        digest = chain(prev, body)
        if digest != e.hash:
            conn.execute(
                "UPDATE journal SET body = %s, hash = %s WHERE run_id = %s AND seq = %s",
                (body, digest, run_id, e.seq),
            )
            changed = True
        prev = digest
    if changed:
        conn.execute("UPDATE runs SET journal_head = %s WHERE id = %s", (prev, run_id))
    return changed


def _one(cur: psycopg.Cursor[tuple[Any, ...]]) -> Any:
    row = cur.fetchone()
    assert row is not None
    return row[0]
