"""Crash tests: real worker processes killed with SIGKILL at named points (or at random), real
Redis and Postgres, and assertions on the world the tools act on (tests/apps/bank.py), not only on
the journal. Shared helpers live here."""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from outlast import Client
from outlast._model import RunRecord
from outlast.queue.streams import Queue
from tests.apps import bank
from tests.conftest import World, wait_for

APP = "tests.apps.bank:app"
APP_V2 = "tests.apps.bank_v2:app"


@contextmanager
def bank_world(world: World) -> Iterator[Client]:
    """The bank's tables in the test's schema, and a client on the test's servers."""
    bank.setup(world.database_url, world.schema)
    client = Client(settings=world.settings())
    try:
        yield client
    finally:
        client.close()


def killed(proc: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    """Wait for a worker armed with a failpoint to kill itself there."""
    try:
        rc = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"the armed worker (pid {proc.pid}) did not hit its failpoint") from None
    assert rc == -signal.SIGKILL, f"worker exited with {rc}, not killed by its failpoint"


def settled(client: Client, run_id: str, timeout: float = 60.0) -> RunRecord:
    """Wait until the run is final or waits durably; return it."""

    def look() -> RunRecord | None:
        run = client.status(run_id)
        return run if run.final or run.state == "waiting" else None

    found: RunRecord = wait_for(look, timeout, 0.2, f"run {run_id} to end or wait")
    return found


def calls(world: World, run_id: str) -> dict[str, int]:
    """How many times each tool (and reconciler, ``reconcile:TOOL``) was dispatched for the run."""
    return {tool: n for tool, n in world.sql("SELECT tool, n FROM calls WHERE run_id = %s", run_id)}


def rows(world: World, table: str, run_id: str) -> list[tuple[Any, ...]]:
    return world.sql(f"SELECT * FROM {table} WHERE run_id = %s ORDER BY id", run_id)


def journal(world: World, run_id: str) -> list[tuple[int, str, str | None, dict[str, Any]]]:
    """(seq, kind, operation, body) of every entry, read straight from Postgres."""
    found = world.sql("SELECT seq, kind, op_id, body FROM journal WHERE run_id = %s ORDER BY seq", run_id)
    return [(seq, kind, op, json.loads(body)) for seq, kind, op, body in found]


def last_message(world: World, run_id: str) -> str:
    """The message of the run's latest event that carries one (refusals, waits)."""
    found = world.sql(
        "SELECT detail->>'message' FROM events WHERE run_id = %s AND detail ? 'message' "
        "ORDER BY id DESC LIMIT 1",
        run_id,
    )
    return str(found[0][0]) if found else ""


def streams_drained(world: World, queues: list[str], timeout: float = 30.0) -> None:
    """Every stream entry was acknowledged (and deleted): none is left to deliver again."""
    q = Queue(world.redis_url, world.prefix, client=object())  # for its key names only
    r = world.redis()
    try:
        wait_for(
            lambda: all(r.xlen(q.stream(name)) == 0 for name in queues),
            timeout,
            0.2,
            f"the streams of {queues} to be drained",
        )
    finally:
        r.close()
