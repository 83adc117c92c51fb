"""A test moves time with the schema's clock offset (migration 0018's ``clock`` table), which
``outlast_now()`` adds to the database clock. Moving it moves every time outlast reads there at
once (timers, approval expiries, deadlines, delayed starts, leases, schedules, ``run.now()`` from
the next claim); nothing stored is rewritten, no journal entry included. Audit stamps and
heartbeats keep the database's own clock (``now()``)."""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

Conn = psycopg.Connection[tuple[Any, ...]]


def move_clock(conn: Conn, seconds: float) -> list[str]:
    """In one transaction on ``conn`` (on the harness's schema), move the schema's clock
    ``seconds`` on and record an ``advanced`` event on each unfinished run with a due time (a
    wake-up, a deadline or a start); return their ids."""
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not 0 < seconds < math.inf:
        raise ValueError(f"advance() takes a positive, finite number of seconds, got {seconds!r}")
    detail = {
        "seconds": seconds,
        "message": f"outlast.testing moved this schema's clock {seconds:g}s on (outlast_now(); the "
        f"database clock and the journal are untouched)",
    }
    with conn.transaction():
        conn.execute(b"UPDATE clock SET shift = shift + %s", (timedelta(seconds=seconds),))
        rows = conn.execute(_ADVANCED, {"detail": Jsonb(detail)}).fetchall()
    return sorted(r[0] for r in rows)


# The events are written under each run's row lock, as every event is (add_event), in the
# writer's lock order.
_ADVANCED = b"""
WITH r AS (
    SELECT id FROM runs
    WHERE outlast_unfinished(state)
      AND (wake_at IS NOT NULL OR deadline IS NOT NULL OR start_at IS NOT NULL)
    ORDER BY id COLLATE "C"
    FOR NO KEY UPDATE)
INSERT INTO events (run_id, kind, detail) SELECT id, 'advanced', %(detail)s FROM r RETURNING run_id
"""
