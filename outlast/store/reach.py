"""This module says why a connection to Postgres failed, in one line that names the setting or the
step to fix it.

The driver's first line says what went wrong (``FATAL: unsupported startup parameter: options``);
it rarely says what to do. Each known first-connection failure gets its way out here: a pooler
without ``OUTLAST_PG_POOLER``, a wrong password, a database that does not exist, a server too old.
A failure not recognised keeps the driver's words alone.
"""

from __future__ import annotations

from outlast._urls import redact
from outlast.errors import ServiceUnavailable

OLDEST_SERVER = 140000  # Postgres 14: the oldest release this outlast supports (tested on 15, 16)

# (words in the driver's message, the way out): the first match is said.
_WAYS_OUT = (
    (
        "unsupported startup parameter",
        "a pooler (PgBouncer?) refuses startup options: set OUTLAST_PG_POOLER=transaction (or session) "
        "to match its pool_mode; see docs/pgbouncer.md",
    ),
    ("password authentication failed", "check the user and password in OUTLAST_DATABASE_URL"),
    ("no password supplied", "put the password in OUTLAST_DATABASE_URL (postgresql://user:password@host/db)"),
    (
        "does not exist",
        "create it (createdb NAME, or CREATE ROLE) or fix the name in OUTLAST_DATABASE_URL",
    ),
    ("no pg_hba.conf entry", "allow this host and user in the server's pg_hba.conf"),
    ("connection refused", "is Postgres running there? check the host and port in OUTLAST_DATABASE_URL"),
    (
        "read-only transaction",
        "it refuses writes: a standby not promoted, or default_transaction_read_only on; point "
        "OUTLAST_DATABASE_URL at the primary",
    ),
)


def unreachable(exc: BaseException, url: str) -> ServiceUnavailable:
    """``exc`` (from connecting to ``url``) as an error that names the URL, never its password, and
    the way out where the failure is a known one."""
    text = str(exc).strip()
    first = text.splitlines()[0] if text else type(exc).__name__
    hint = next((f" ({way})" for words, way in _WAYS_OUT if words in text.lower()), "")
    return ServiceUnavailable(f"cannot reach Postgres at {redact(url)}: {first}{hint}")


def too_old(version: int, url: str) -> ServiceUnavailable | None:
    """A refusal of a server older than ``OLDEST_SERVER`` (``version`` as libpq gives it), or None."""
    if version >= OLDEST_SERVER:
        return None
    major = version // 10000 if version >= 100000 else version / 10000
    return ServiceUnavailable(
        f"Postgres {major} at {redact(url)} is older than outlast supports "
        f"({OLDEST_SERVER // 10000} or newer): upgrade it, or point OUTLAST_DATABASE_URL at a newer one"
    )
