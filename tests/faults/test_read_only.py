"""Postgres read-only for a few leases (``default_transaction_read_only``, as a standby not yet
promoted would answer): every write refused, every read answered. Every worker sees it; once it
ends, each owner renews its expired leases first: no run changes hands while its owner is alive
(the sweeper re-publishes no run whose lease ran out until its worker has been answered for a
whole lease, as a reclaim waits), so none goes in doubt; every run succeeds, one effect each."""

from __future__ import annotations

import time

import psycopg
import pytest

from tests.conftest import wait_for
from tests.faults import FaultWorld, check_every_run_once, enqueue_many

pytestmark = pytest.mark.slow

RUNS = 40


def read_only(fw: FaultWorld, on: bool) -> None:
    assert fw.pg is not None
    with psycopg.connect(fw.pg.url(), autocommit=True) as c:
        c.execute(b"SET default_transaction_read_only = off")
        if on:
            c.execute(b"ALTER SYSTEM SET default_transaction_read_only = on")
        else:
            c.execute(b"ALTER SYSTEM RESET default_transaction_read_only")
        c.execute(b"SELECT pg_reload_conf()")


@pytest.mark.timeout(180)
def test_postgres_read_only_for_a_few_leases_moves_no_run(fw: FaultWorld) -> None:
    for k in range(2):
        fw.start(f"ro-{k}", "-c", "16")
    ids = enqueue_many(fw, "chain", [{"tool": "slow_effect", "n": 5, "seconds": 0.3} for _ in range(RUNS)])
    busy = "SELECT count(*) FROM runs WHERE state = 'running' AND journal_len > 0"
    wait_for(lambda: fw.sql(busy)[0][0] >= 16, 60, 0.05, "runs to be in flight")
    read_only(fw, True)
    try:
        time.sleep(5.0)  # 2.5 leases (TTL 2 s), past the sweeper's republish_after (1 s)
    finally:
        read_only(fw, False)
    fw.wait_settled(ids, timeout=120)
    check_every_run_once(fw, ids)
    moved = fw.sql("SELECT count(*) FROM runs WHERE id = ANY(%s) AND fencing_token > 1", ids)[0][0]
    print(f"\nruns claimed more than once: {moved}")
    assert moved == 0, f"{moved} runs changed hands after Postgres was read-only, their owners alive"


def test_health_fails_while_postgres_is_read_only_or_redis_is_full(fw: FaultWorld) -> None:
    """``outlast health`` answers, and fails, naming what refuses writes and the way out: Postgres
    read-only (``default_transaction_read_only``), Redis full (``maxmemory`` with
    ``noeviction``); healthy again once each is over."""
    assert fw.rd is not None
    healthy = fw.cli("health")
    assert healthy.returncode == 0, healthy.stdout + healthy.stderr
    read_only(fw, True)
    try:
        found = fw.cli("health")
    finally:
        read_only(fw, False)
    assert found.returncode == 1 and "refuses writes (a standby not promoted" in found.stderr, found.stderr
    r = fw.redis()
    try:
        used = int(r.info("memory")["used_memory"])
        r.config_set("maxmemory-policy", "noeviction")
        r.config_set("maxmemory", str(used))
        full = fw.cli("health")
    finally:
        r.config_set("maxmemory", "0")
        r.close()
    assert full.returncode == 1 and "is full" in full.stderr and "raise its maxmemory" in full.stderr, (
        full.stderr
    )
    again = fw.cli("health")
    assert again.returncode == 0, again.stderr
