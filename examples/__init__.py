"""The seeds' three scenarios, as apps a worker serves (``outlast worker examples.NAME:app``):
``payments``, ``research_report`` and ``backlog_approval``. The last two also run end to end with
``python -m examples.NAME`` from the repository root, through :func:`local_worker`.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from outlast import Client, OutlastError, Settings
from outlast.services import resolve

ROOT = Path(__file__).resolve().parents[1]


def own_tables(schema_of: Callable[[str], str], ddl: str) -> tuple[str, str]:
    """Create an example's tables (``ddl``, with ``{s}`` for its schema) once, in a schema beside
    the one the worker serves; return (database URL, that schema)."""
    settings, _ = resolve(Settings.from_env())
    assert settings.database_url
    schema = schema_of(settings.schema)
    with psycopg.connect(settings.database_url, autocommit=True) as conn, conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (schema,))
        conn.execute(sql.SQL(ddl).format(s=sql.Identifier(schema)))
    return settings.database_url, schema


@contextlib.contextmanager
def local_worker(app_spec: str) -> Iterator[Client]:
    """A Client, outlast's schema migrated, and one worker process serving ``app_spec``: on the
    configured servers (``OUTLAST_DATABASE_URL`` / ``OUTLAST_REDIS_URL``), or on the embedded
    default when neither is set."""
    client = Client.from_env()
    if client.note:
        print(client.note)
    s = client.settings
    assert s.database_url and s.redis_url
    env = {
        **os.environ,
        "OUTLAST_DATABASE_URL": s.database_url,
        "OUTLAST_REDIS_URL": s.redis_url,
        "OUTLAST_SCHEMA": s.schema,
        "OUTLAST_PREFIX": s.prefix,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    outlast = [sys.executable, "-m", "outlast"]
    subprocess.run([*outlast, "migrate"], env=env, cwd=ROOT, check=True, capture_output=True)
    log = tempfile.NamedTemporaryFile(prefix="outlast-worker-", suffix=".log", delete=False)
    worker = subprocess.Popen([*outlast, "worker", app_spec], env=env, cwd=ROOT, stdout=log, stderr=log)
    try:
        yield client
    finally:
        worker.terminate()
        worker.wait(30)
        client.close()
        log.close()
        print(f"(the worker's log: {log.name})")


def pending_approval(client: Client, run_id: str, timeout: float = 30.0) -> dict[str, Any]:
    """Wait until the run awaits a decision; return the pending request (its ``op_id`` is the
    approval id, ``args`` and ``args_hash`` what the approver sees)."""
    until = time.monotonic() + timeout
    while True:
        run = client.status(run_id)
        if run.final:
            raise OutlastError(f"run '{run_id}' ended {run.state} before asking: {run.error}")
        if run.state == "awaiting_approval":
            asks = [a for a in client.approvals(run_id) if a["status"] == "pending"]
            if asks:
                return asks[-1]
        if time.monotonic() > until:
            raise OutlastError(f"run '{run_id}' is still {run.state} after {timeout:.0f}s")
        time.sleep(0.1)
