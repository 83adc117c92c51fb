"""No fault at all: a load of short runs on real workers with a 1 s lease. Every run succeeds, every
operation has exactly one effect, and Postgres counts no deadlock (pg_stat_database, on the private
cluster, so nobody else's deadlocks count) nor does any worker log one."""

from __future__ import annotations

import time

import pytest

from tests.conftest import wait_for
from tests.faults import LONG, FaultWorld, check_every_run_once, enqueue_many

RUNS = 4000 if LONG else 1000


def deadlocks(world: FaultWorld) -> int:
    return int(world.sql("SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()")[0][0])


def others_connected(world: FaultWorld) -> int:
    """Client backends other than this one: each flushes its statistics when it exits."""
    found = world.sql(
        "SELECT count(*) FROM pg_stat_activity "
        "WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()"
    )
    return int(found[0][0])


@pytest.mark.timeout(900 if LONG else 200)
@pytest.mark.parametrize(("workers", "concurrency"), [(2, 64), (1, 128)], ids=["2x64", "1x128"])
def test_load_without_faults(fw: FaultWorld, workers: int, concurrency: int) -> None:
    wait_for(lambda: others_connected(fw) == 0, 30, 0.1, "an earlier test's connections to close")
    before = deadlocks(fw)
    for k in range(workers):
        fw.start(f"load-{k}", "-c", str(concurrency), "--lease-ttl", "1", OUTLAST_LEASE_TTL="1")
    began = time.monotonic()
    ids = enqueue_many(fw, "chain", [{"tool": "effect", "n": 5} for _ in range(RUNS)])
    enqueued = time.monotonic() - began
    fw.wait_settled(ids, timeout=600 if LONG else 120)
    took = time.monotonic() - began
    print(
        f"\n{RUNS} runs x 5 operations on {workers} worker(s) -c {concurrency}: enqueued in "
        f"{enqueued:.1f}s, all settled after {took:.1f}s ({RUNS * 5 / took:.0f} operations/s)"
    )
    fw.stop_all()
    wait_for(lambda: others_connected(fw) == 0, 30, 0.1, "the workers' connections to close")
    found = deadlocks(fw) - before
    print(f"deadlocks counted by Postgres: {found}")
    check_every_run_once(fw, ids)
    assert found == 0, f"Postgres detected {found} deadlock(s); logs: {fw.log_lines('deadlock')}"
    assert "deadlock" not in fw.logs().lower(), fw.log_lines("deadlock")
