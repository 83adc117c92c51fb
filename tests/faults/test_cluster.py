"""Queues on a real Redis Cluster: six ``redis-server --cluster-enabled yes`` processes the test
starts (three masters, one replica each), two worker processes serving two queues through a
``redis+cluster://`` URL, and ``CLUSTER FAILOVER`` on the replica of the master holding queue
``a``'s slot while runs are in flight and more are queued. Postgres is the machine's; the cluster
is the test's own.

Nothing may be lost or doubled: every run succeeds with one effect per operation. The workers run
with OUTLAST_REPUBLISH_AFTER=60, so the sweeper cannot hide a lost stream entry within the bound:
the failover itself must lose none. The time the failover took (the replica promoted, then the
first run of queue ``a`` done after it) is measured and printed."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from outlast.errors import ConfigError
from outlast.queue import Queue
from outlast.settings import Settings
from tests.conftest import wait_for
from tests.faults import FaultWorld, check_every_run_once, enqueue_many
from tests.faults.cluster import PrivateCluster
from tests.faults.servers import redis_world

pytestmark = pytest.mark.slow

RUNS = 150  # per queue
CALL = 0.1  # seconds each call sleeps: the load lasts several seconds on 2 x 16 slots
BOUND = 30.0  # seconds from the failover to every run done
REPUBLISH_AFTER = 60


@pytest.fixture
def cw(services: tuple[str, str], tmp_path: Path) -> Iterator[FaultWorld]:
    """A world whose queue is a private Redis Cluster (``cw.cluster``); outlast's tables and the
    world's effects in schemas of the shared test Postgres."""
    with redis_world(services, tmp_path, PrivateCluster, "cluster") as (w, cluster):
        w.cluster = cluster  # type: ignore[attr-defined]
        yield w


async def test_a_cluster_url_picks_the_cluster_client() -> None:
    """``redis+cluster://`` (and ``rediss+cluster://``) selects the cluster client; a plain URL the
    standalone one. No server is needed: neither client connects before its first command."""
    url = "redis+cluster://127.0.0.1:7000"
    assert Settings.from_env({"OUTLAST_REDIS_URL": url}).redis_url == url
    assert Settings.from_env({"OUTLAST_REDIS_URL": "rediss+cluster://h:7000"}).redis_url
    with pytest.raises(ConfigError, match="redis\\+cluster://"):
        Settings.from_env({"OUTLAST_REDIS_URL": "cluster://h:7000"})
    q = Queue(url, "p", connections=8)
    assert q.cluster and type(q.redis).__name__ == "RedisCluster"
    assert q.alive_key("a") == "p:{a}:alive"  # the marker in the queue's slot
    await q.close()
    plain = Queue("redis://127.0.0.1:6379/0", "p")
    assert not plain.cluster and plain.alive_key("a") == "p:alive"
    await plain.close()


def succeeded(w: FaultWorld, queue: str) -> int:
    return int(w.sql("SELECT count(*) FROM runs WHERE queue = %s AND state = 'succeeded'", queue)[0][0])


@pytest.mark.timeout(120)
def test_two_queues_on_a_cluster_survive_a_failover(cw: FaultWorld) -> None:
    cluster: PrivateCluster = cw.cluster  # type: ignore[attr-defined]
    for k in range(2):
        cw.start(f"cl-{k}", "-q", "a", "-q", "b", "-c", "16", OUTLAST_REPUBLISH_AFTER=str(REPUBLISH_AFTER))
    wait_for(
        lambda: len(cw.logged("worker.started", queues=["a", "b"])) == 2, 30, 0.05, "both workers to serve"
    )
    work = [{"tool": "slow_effect", "n": 5, "seconds": CALL} for _ in range(RUNS)]
    ids = enqueue_many(cw, "chain", work, queue="a") + enqueue_many(cw, "chain", work, queue="b")
    wait_for(lambda: succeeded(cw, "a") >= 20, 60, 0.02, "the first runs of queue a to succeed")

    stream = f"{cw.prefix}:{{a}}:runs"
    master = cluster.master_of(stream)
    before = dict(cw.states())
    alarms = len(cw.logged("redis.data_lost"))  # none: a fresh Redis is not a loss
    done_a = succeeded(cw, "a")
    began = time.monotonic()
    replica = cluster.failover(master)
    cluster.wait_master(replica)
    promoted = time.monotonic() - began
    wait_for(lambda: cluster.master_of(stream) == replica, 10, 0.02, "queue a's slot to move to the replica")
    wait_for(lambda: succeeded(cw, "a") > done_a or done_a == RUNS, BOUND, 0.02, "queue a to go on")
    resumed = time.monotonic() - began
    print(
        f"\nCLUSTER FAILOVER of {master} (queue a's master) onto {replica} with runs {before}: "
        f"replica master after {promoted:.2f}s, a run of queue a done {resumed:.2f}s after the failover"
    )
    took = cw.wait_settled(
        ids, timeout=BOUND, what=f"every run to settle within {BOUND:.0f}s of the failover"
    )
    print(
        f"all {len(ids)} runs settled {time.monotonic() - began:.1f}s after the failover (waited {took:.1f}s)"
    )
    wait_for(cluster.healthy, 30, 0.1, "the cluster to be ok again, the old master now a replica")
    assert cluster.replicas().get(replica) == master, "the old master did not become the new one's replica"
    check_every_run_once(cw, ids)
    # Nothing lost: no data-loss alarm since the failover (it would re-publish every run at once).
    assert len(cw.logged("redis.data_lost")) == alarms, cw.log_lines("redis.data_lost")
