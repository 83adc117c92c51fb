"""Effects that the world itself fences are the one way to close the window no worker can close.

A worker checks its lease before every dispatch, but a process can pause (GC, SIGSTOP, a full
machine) *after* its last check and wake past its lease, while another worker has taken the run
over and, asked the world, executed the operation again. Only the place the effect lands can
refuse the late one (Kleppmann's fencing rule). For effects written to Postgres, do it in the
effect's own transaction:

    @app.tool("pay")
    def pay(order: str, amount: int) -> dict:
        with psycopg.connect(SHOP) as conn:  # one transaction: the fence and the effect
            if not fence(conn, current_action()):
                return {"already": True}  # this operation's effect is already there
            conn.execute("INSERT INTO payments ...")
        return {"paid": amount}

``fence`` records the operation's idempotency key (an effect happens once per operation) and the
highest fencing token seen for the run (a stale worker is refused with ``Fenced``, even for an
operation the new owner has not reached yet). Both rows commit or roll back with the effect.
"""

from __future__ import annotations

from typing import Any

from outlast.action import Action
from outlast.errors import Fenced

TABLES = """
CREATE TABLE IF NOT EXISTS outlast_fences (
    run_id        text PRIMARY KEY,
    fencing_token bigint NOT NULL
);
CREATE TABLE IF NOT EXISTS outlast_effects (
    idempotency_key text PRIMARY KEY,
    run_id          text NOT NULL,
    fencing_token   bigint NOT NULL,
    at              timestamptz NOT NULL DEFAULT now()
);
"""

_FENCE = """
INSERT INTO outlast_fences (run_id, fencing_token) VALUES (%(run)s, %(token)s)
ON CONFLICT (run_id) DO UPDATE SET fencing_token = excluded.fencing_token
    WHERE outlast_fences.fencing_token <= excluded.fencing_token
RETURNING fencing_token
"""

_EFFECT = """
INSERT INTO outlast_effects (idempotency_key, run_id, fencing_token) VALUES (%(key)s, %(run)s, %(token)s)
ON CONFLICT (idempotency_key) DO NOTHING
RETURNING idempotency_key
"""


def fence(conn: Any, action: Action) -> bool:
    """Inside the effect's transaction on a psycopg (sync) connection or cursor whose search
    path holds the tables of ``TABLES``: True if the effect may happen now; False if this
    operation's effect is already recorded (do nothing). Raises ``Fenced`` if a newer fencing
    token of the run has been seen: this worker was superseded. Locks the run's fence row until
    the transaction ends, so two workers never pass it for the same run at once."""
    params = {"run": action.run_id, "token": action.fencing_token, "key": action.idempotency_key}
    if conn.execute(_FENCE, params).fetchone() is None:
        raise Fenced(action.run_id, action.fencing_token)
    return conn.execute(_EFFECT, params).fetchone() is not None
