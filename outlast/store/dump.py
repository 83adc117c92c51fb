"""``schema.sql`` holds the whole schema the migrations make, in one file a reader can open. It is what
``pg_dump --schema-only`` prints of a freshly migrated schema, made stable (no run-specific lines,
the schema named ``outlast``). Regenerate it after changing a migration:

    python -m outlast.store.dump postgresql://USER@HOST/DB > schema.sql

(``tests/integration/test_migrations.py`` fails while it differs from a freshly migrated schema).
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import uuid

import psycopg

from outlast._urls import redact
from outlast.store.migrate import SCHEMA_VERSION
from outlast.store.store import Store

_DROPPED = re.compile(r"^(--|SET |SELECT pg_catalog\.set_config|\\restrict|\\unrestrict)")


def pg_dump_major() -> int:
    """The major version of the ``pg_dump`` on PATH (its output differs between majors)."""
    out = subprocess.run(["pg_dump", "--version"], capture_output=True, text=True, check=True).stdout
    m = re.search(r"(\d+)(?:\.\d+)?", out)
    if not m:
        raise RuntimeError(f"pg_dump --version printed {out!r}")
    return int(m[1])


def dump(url: str, schema: str) -> str:
    """The DDL of ``schema`` as pg_dump prints it, without owners, grants, comments and settings,
    the schema's name replaced by ``outlast``."""
    done = subprocess.run(
        ["pg_dump", "--schema-only", "--no-owner", "--no-privileges", f"--schema={schema}", url],
        capture_output=True,
        text=True,
    )
    if done.returncode:
        raise RuntimeError(f"pg_dump of schema {schema} in {redact(url)} failed: {done.stderr.strip()}")
    lines = [ln for ln in done.stdout.splitlines() if not _DROPPED.match(ln)]
    text = re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()
    text = re.sub(rf"\b{re.escape(schema)}\b", "outlast", text)
    header = (
        f"-- The whole outlast schema, version {SCHEMA_VERSION}: what its migrations\n"
        "-- (outlast/store/migrations/NNNN_*.sql) make, as pg_dump "
        f"{pg_dump_major()} prints it. Generated; do not edit:\n"
        "-- python -m outlast.store.dump postgresql://USER@HOST/DB > schema.sql\n"
    )
    return f"{header}\n{text}\n"


def migrated(url: str) -> str:
    """``dump`` of a schema of its own, migrated from nothing to the newest version, then dropped."""
    schema = f"outlast_dump_{uuid.uuid4().hex[:10]}"

    async def migrate() -> None:
        store = Store(url, schema)
        await store.open(check=False)
        try:
            await store.migrate()
        finally:
            await store.close()

    try:
        asyncio.run(migrate())
        return dump(url, schema)
    finally:
        with psycopg.connect(url, autocommit=True) as c:
            c.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'.encode())


if __name__ == "__main__":
    sys.stdout.write(migrated(sys.argv[1]))
