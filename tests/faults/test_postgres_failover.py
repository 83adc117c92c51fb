"""Postgres fails over under load: a private primary with a synchronous standby (pg_basebackup
-R, synchronous_standby_names), the workers given both in one multi-host URL with
target_session_attrs=read-write (docs/postgres-ha.md). The primary and all its processes are
SIGKILLed mid-load (a machine lost), the standby promoted (pg_ctl promote), and the workers go on
against it with no restart. Nothing committed is lost (synchronous replication), nothing is
done twice: every run succeeds and every operation left exactly one receipt in the world.

The time to recover, from the promotion to the first run finished on the new primary (database
clock), is printed and held to the stated bound: the lease TTL + 2 s."""

from __future__ import annotations

import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from tests.apps import faults as faults_app
from tests.conftest import drop_keys, drop_schemas, migrate_schema, wait_for
from tests.faults import FaultWorld, check_every_run_once, enqueue_many
from tests.faults.pair import Pair

RUNS = 200
CALL = 0.2  # seconds each call sleeps: a run lasts at least a second, so many are in flight
LEASE_TTL = 2.0
DETECTION = 1.0  # seconds from the crash to the promotion, as a failover manager would take


@pytest.fixture
def pair() -> Iterator[Pair]:
    root = Path(tempfile.mkdtemp(prefix="outlast-failover-"))
    root.chmod(0o755)  # the postgres user must reach its directories
    p = Pair(root)
    try:
        p.start()
        yield p
    finally:
        p.destroy()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def fw(services: tuple[str, str], pair: Pair, tmp_path: Path) -> Iterator[FaultWorld]:
    shared_db, shared_redis = services  # Redis is not the fault here: the shared one, a prefix of its own
    tag = uuid.uuid4().hex[:10]
    w = FaultWorld(
        pair.url(), shared_redis, f"t_{tag}", f"t{tag}", tmp_path,
        effects_url=shared_db, effects_schema=f"fx_{tag}",
    )  # fmt: skip
    migrate_schema(w.database_url, w.schema)
    faults_app.setup(w.effects_url, w.effects_schema)
    try:
        yield w
    finally:
        w.stop_all()
        drop_schemas(w.effects_url, w.effects_schema)
        drop_keys(w)


def db_now(fw: FaultWorld) -> datetime:
    now: datetime = fw.sql("SELECT now()")[0][0]
    return now


@pytest.mark.timeout(300)
def test_primary_killed_mid_load_and_the_synchronous_standby_promoted(fw: FaultWorld, pair: Pair) -> None:
    ttl = str(int(LEASE_TTL))
    for k in range(2):
        fw.start(f"ha-{k}", "-c", "16", "--lease-ttl", ttl, OUTLAST_LEASE_TTL=ttl)
    ids = enqueue_many(fw, "chain", [{"tool": "slow_effect", "n": 5, "seconds": CALL} for _ in range(RUNS)])
    wait_for(
        lambda: fw.sql("SELECT count(*) FROM runs WHERE state = 'running' AND journal_len > 0")[0][0] >= 16,
        30,
        0.05,
        "runs to be in flight",
    )
    before = dict(fw.states())
    pair.crash_primary()
    time.sleep(DETECTION)
    pair.promote()
    promoted = db_now(fw)  # the new primary's clock, as the promotion completed
    print(f"\nprimary SIGKILLed with runs {before}; standby promoted {DETECTION:.0f}s later")

    took = fw.wait_settled(ids, timeout=150)
    first = fw.sql("SELECT min(finished_at) FROM runs WHERE finished_at > %s", promoted)[0][0]
    assert first is not None, "no run finished after the promotion"
    recovered = (first - promoted).total_seconds()
    print(
        f"recovery: the first run finished {recovered:.2f}s after the promotion "
        f"(bound: lease TTL {LEASE_TTL:.0f}s + 2s); all {RUNS} settled {took:.1f}s after it"
    )
    check_every_run_once(fw, ids)
    assert recovered <= LEASE_TTL + 2, f"recovered {recovered:.2f}s after the promotion"
