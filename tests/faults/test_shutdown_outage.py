"""SIGTERM while Postgres is gone. A worker holding runs mid-tool loses its Postgres (killed, or
its database unreachable), then gets SIGTERM: it exits within its grace period (+5 s), not after
its writer's ``retry_for`` (60 s). What it could not write is left to the lease, as after a
crash: Postgres comes back, another worker takes the runs over, and every operation has exactly
one effect (the tools are reconciled and idempotent: nothing in doubt). Every line its JSON log
got, psycopg_pool's own failed connection attempts included, is JSON."""

from __future__ import annotations

import json
import signal
import subprocess
import time

import pytest

from tests.conftest import wait_for
from tests.faults import FaultWorld, enqueue_many

pytestmark = pytest.mark.crash

GRACE = 3.0
RUNS = 6


def is_json(line: str) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False


@pytest.mark.timeout(240)
def test_sigterm_with_postgres_killed_mid_tool(fw: FaultWorld) -> None:
    assert fw.pg is not None
    a = fw.start("gone-a", "-c", "8", "--grace", f"{GRACE:g}", OUTLAST_GRACE=f"{GRACE:g}")
    ids = enqueue_many(fw, "mixed", [{"seconds": 1.0} for _ in range(RUNS)])
    busy = "SELECT count(*) FROM runs WHERE state = 'running' AND journal_len > 0"
    wait_for(lambda: fw.sql(busy)[0][0] == RUNS, 60, 0.05, "every run to be mid-tool")
    fw.pg.stop()  # its connections cut, nothing answers
    time.sleep(0.5)  # the tools' calls end, their results have nowhere to go
    began = time.monotonic()
    a.send_signal(signal.SIGTERM)
    try:
        rc = a.wait(GRACE + 5)
        took = time.monotonic() - began
    except subprocess.TimeoutExpired:
        took = time.monotonic() - began
        a.kill()
        a.wait(10)
        fw.pg.start()
        pytest.fail(
            f"the worker had not exited {took:.1f}s after SIGTERM (grace {GRACE:g}s) with Postgres gone\n"
            + fw.log_tail()
        )
    print(f"\nworker exited {took:.1f}s after SIGTERM (grace {GRACE:g}s), code {rc}")
    plain = [line for line in (fw.tmp / "worker-0.log").read_text().splitlines() if not is_json(line)]
    assert not plain, f"{len(plain)} lines of its JSON log are not JSON, e.g. {plain[:3]}"
    fw.pg.start()
    fw.start("gone-b")
    fw.wait_settled(ids, timeout=120, what="another worker to finish the runs")
    states = fw.states()
    assert states == {"succeeded": RUNS}, states
    effects = fw.effects()
    wanted = {(rid, f"op-{k}") for rid in ids for k in range(1, 6)}
    assert set(effects) == wanted and set(effects.values()) == {1}, sorted(effects.items())[:10]
