"""The queue through Redis Sentinel, and a failover under load: a primary, its replica and three
sentinels of the test's own (tests/faults/sentinel.py), two worker processes given only a
``redis+sentinel://`` URL (with the primary's password), 200 runs. Mid-load the replica is cut
off from the primary (it can no longer log in), 20 more runs are enqueued (their stream entries
exist only on the primary: what an asynchronous replica misses when its primary dies), and the
primary is killed with SIGKILL. The sentinels promote the replica.

Every run must end as it would have without the fault: succeeded, one effect per operation in
the world. The workers run with OUTLAST_REPUBLISH_AFTER=60, so the lost entries must come back
through the data-loss path (the new primary's replication id), within the bound, not through
the sweeper's slow re-publication. Postgres is the machine's; the Redis deployment the test's own.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import wait_for
from tests.faults import FaultWorld, check_every_run_once, enqueue_many
from tests.faults.sentinel import PrivateSentinel
from tests.faults.servers import redis_world

pytestmark = pytest.mark.slow

RUNS = 200
TAIL = 20  # enqueued while the replica is cut off: lost with the primary
CALL = 0.2  # seconds each call sleeps: the load lasts several seconds on 2 x 16 slots
BOUND = 30.0  # seconds from the kill to every run done
REPUBLISH_AFTER = 60


@pytest.fixture
def sw(services: tuple[str, str], tmp_path: Path) -> Iterator[FaultWorld]:
    """A world whose queue is a private Sentinel deployment (``sw.sentinel``); outlast's tables
    and the world's effects in schemas of the shared test Postgres."""
    with redis_world(services, tmp_path, PrivateSentinel, "sentinel") as (w, deployment):
        w.sentinel = deployment  # type: ignore[attr-defined]
        yield w


def succeeded(w: FaultWorld) -> int:
    return int(w.sql("SELECT count(*) FROM runs WHERE state = 'succeeded'")[0][0])


@pytest.mark.timeout(180)
def test_the_primary_killed_mid_load(sw: FaultWorld) -> None:
    deployment: PrivateSentinel = sw.sentinel  # type: ignore[attr-defined]
    for k in range(2):
        sw.start(f"se-{k}", "-c", "16", OUTLAST_REPUBLISH_AFTER=str(REPUBLISH_AFTER))
    work = [{"tool": "slow_effect", "n": 5, "seconds": CALL} for _ in range(RUNS)]
    ids = enqueue_many(sw, "chain", work)
    wait_for(lambda: succeeded(sw) >= 20, 60, 0.05, "the first runs to succeed")
    time.sleep(2.5)  # every worker swept since it started (a first sweep may find a fresh Redis)

    deployment.cut_replication()
    ids += enqueue_many(sw, "chain", work[:TAIL])
    written, applied = deployment.offsets()
    assert written > applied, "the replica has everything: nothing would be lost"
    before = dict(sw.states())
    alarms = len(sw.logged("redis.data_lost"))
    began = time.monotonic()
    deployment.kill(deployment.primary)
    deployment.restore_auth()
    deployment.wait_promoted(deployment.replica, BOUND)
    promoted = time.monotonic() - began
    print(
        f"\nSIGKILL of the primary with runs {before}, {written - applied} bytes not replicated: "
        f"the replica promoted after {promoted:.1f}s"
    )
    took = sw.wait_settled(ids, timeout=BOUND, what=f"every run to settle within {BOUND:.0f}s of the kill")
    print(f"all {len(ids)} runs settled {time.monotonic() - began:.1f}s after the kill (waited {took:.1f}s)")
    assert len(sw.logged("redis.data_lost")) > alarms, "no worker noticed the new primary"
    check_every_run_once(sw, ids)
