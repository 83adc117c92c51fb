"""The store is Postgres, the source of truth; it is the only package that speaks SQL.

Every statement is named in ``sql/*.sql``, one file per family beside its module (parsed once by
``queries.py``); a fact several share is a function of migration 0015, said once
(``tests/integration/test_queries.py``). ``Store`` (``store.py``) is composed of its connections
(``connection.py``: the read pool, ``_rows``, ``_write``), its migrations (``migrate.py``,
``steps.py``, ``migrations/``) and one object per family of queries over that connection
(``store.runs``, ``store.leases``, ``store.journal``, ``store.approvals``, ``store.fleet``...:
``FAMILIES``), each a ``Family`` (``base.py``) reaching Postgres only through the connection.
Writes go through the shared-commit writer (``writer.py``: at most ``MAX_BATCH`` (256) writes and
``MAX_BATCH_BYTES`` (4 MiB) of parameters a commit), whose connection asks for generic plans (a
statement over the partitioned journal is not re-planned per run); ``wire.py`` sends a batch as
prepared statements and one Sync on libpq's pipeline: one implicit transaction. ``store.journal.append`` is
the one way into the journal, for the lease holder (its fencing token; ``submit_append`` queues it
at once) and for a resolution from the producer side (``OnWait``). Beside ``Store``: the dashboard's
sessions (``sessions.py``, reached as ``AsyncClient.sessions``) and a reader's wake-ups
(``notify.py``). ``schema.sql`` at the top of the repository is the whole schema in one file
(``dump.py``).
"""

from outlast.store.store import (
    FAMILIES,
    SCHEMA_VERSION,
    ChildStart,
    Claimed,
    OnWait,
    Pruned,
    Store,
    redact,
    schema_sql,
)

__all__ = [
    "FAMILIES",
    "SCHEMA_VERSION",
    "ChildStart",
    "Claimed",
    "OnWait",
    "Pruned",
    "Store",
    "redact",
    "schema_sql",
]
