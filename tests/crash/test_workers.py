"""The foundation under real failures: real worker processes, killed, stopped and flushed."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator

import pytest

from outlast import Client
from tests.conftest import World, wait_for

pytestmark = pytest.mark.crash


def state(world: World, run_id: str) -> tuple[str, str | None]:
    rows = world.sql("SELECT state, reason FROM runs WHERE id = %s", run_id)
    return rows[0] if rows else ("missing", None)


def executions(world: World, run_id: str, what: str = "%") -> int:
    return world.sql("SELECT count(*) FROM executions WHERE run_id = %s AND what LIKE %s", run_id, what)[0][0]


def test_ack_only_after_commit_and_no_second_execution(world: World) -> None:
    with Client(settings=world.settings()) as c:
        run = c.enqueue("echo", {"n": 1})
        first = world.worker(OUTLAST_FAILPOINTS="before_ack", OUTLAST_REPUBLISH_AFTER="60")
        assert first.wait(30) == -signal.SIGKILL  # died after the commit, before XACK
        assert state(world, run.id) == ("succeeded", None)
        r = world.redis()
        pending = r.xpending(f"{world.prefix}:{{default}}:runs", "workers")
        assert pending["pending"] == 1  # the entry was never acknowledged
        world.worker()  # a new worker re-delivers the entry and finds the run final
        wait_for(
            lambda: r.xpending(f"{world.prefix}:{{default}}:runs", "workers")["pending"] == 0,
            what="the entry to be acknowledged",
        )
        assert executions(world, run.id) == 1
        assert c.status(run.id).result == {"echo": {"n": 1}}


def test_two_workers_racing_execute_each_run_once(world: World) -> None:
    with Client(settings=world.settings()) as c:
        ids = [c.enqueue("echo", {"i": i}).id for i in range(20)]
        r = world.redis()
        for rid in ids:  # every run is delivered twice, as after a republish
            r.xadd(f"{world.prefix}:{{default}}:runs", {"run": rid})
        world.worker()
        world.worker()
        for rid in ids:
            assert c.wait(rid, timeout=30).state == "succeeded"
    counts = world.sql("SELECT run_id, count(*) FROM executions GROUP BY run_id")
    assert len(counts) == 20 and all(n == 1 for _, n in counts)


def test_stale_worker_cannot_commit_after_takeover(world: World) -> None:
    with Client(settings=world.settings()) as c:
        run = c.enqueue("slow", {"seconds": 4})
        a = world.worker()
        wait_for(lambda: executions(world, run.id, f"start:{a.pid}"), what="worker A to start the run")
        a.send_signal(signal.SIGSTOP)  # frozen past its 2 s lease
        b = world.worker()
        done = c.wait(run.id, timeout=40)
        assert done.state == "succeeded"
        assert done.result["pid"] == b.pid  # the result is the new owner's
        token_after = world.sql("SELECT fencing_token FROM runs WHERE id = %s", run.id)[0][0]
        a.send_signal(signal.SIGCONT)  # A wakes up, finishes its body, tries to commit
        wait_for(lambda: executions(world, run.id, f"end:{a.pid}"), what="worker A to wake up")
        time.sleep(1.0)
        after = c.status(run.id)
        assert after.result["pid"] == b.pid
        assert after.fencing_token == token_after
        assert world.sql("SELECT count(*) FROM events WHERE run_id = %s AND kind = 'succeeded'", run.id) == [
            (1,)
        ]
        wait_for(
            lambda: "stale" in world.logs() or world.logged("lease.lost"), what="A to know it was fenced"
        )


def test_killed_worker_run_completes_elsewhere_after_lease(world: World) -> None:
    with Client(settings=world.settings()) as c:
        run = c.enqueue("slow", {"seconds": 2})
        a = world.worker()
        wait_for(lambda: executions(world, run.id, f"start:{a.pid}"), what="worker A to start the run")
        a.send_signal(signal.SIGKILL)
        b = world.worker()
        done = c.wait(run.id, timeout=40)
        assert done.state == "succeeded" and done.result["pid"] == b.pid
        assert executions(world, run.id, "end:%") == 1


@pytest.fixture
def private_redis(world: World) -> Iterator[World]:
    """A Redis of this test's own, so that FLUSHALL touches nobody else."""
    from outlast import _embedded as embedded

    found = embedded._find_redis()
    if found is None:
        pytest.skip("no redis-server binary")
    port = embedded._free_port(None)
    p = subprocess.Popen(
        [str(found[0]), "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
    )
    shared, world.redis_url = world.redis_url, f"redis://127.0.0.1:{port}/0"
    wait_for(lambda: _pings(world), what="the private Redis")
    try:
        yield world
    finally:
        world.stop_all()
        p.terminate()
        p.wait(10)
        world.redis_url = shared


def _pings(world: World) -> bool:
    try:
        return bool(world.redis().ping())
    except Exception:
        return False


def test_flushall_loses_nothing(private_redis: World) -> None:
    world = private_redis
    with Client(settings=world.settings()) as c:
        ids = [c.enqueue("slow", {"seconds": 0.5, "tag": str(i)}).id for i in range(20)]
        world.worker("tests.apps.basic:app", "--concurrency", "4")
        wait_for(
            lambda: world.sql("SELECT count(*) FROM runs WHERE state = 'running'")[0][0] > 0,
            what="some runs to be running",
        )
        world.redis().flushall()
        for rid in ids:
            assert c.wait(rid, timeout=60).state == "succeeded"
    assert world.sql("SELECT count(DISTINCT run_id) FROM executions WHERE what LIKE 'end:%%'") == [(20,)]


def test_garbage_entry_is_dead_lettered_and_worker_keeps_serving(world: World) -> None:
    r = world.redis()
    stream = f"{world.prefix}:{{default}}:runs"
    r.xadd(stream, {"garbage": "\x00not a run"})
    r.xadd(stream, {"run": "no-such-run"})
    world.worker()
    with Client(settings=world.settings()) as c:
        run = c.enqueue("echo", {"after": "garbage"})
        assert c.wait(run.id, timeout=30).state == "succeeded"
    dead = wait_for(lambda: r.xrange(f"{world.prefix}:{{default}}:dead"), what="dead letters")
    reasons = sorted(d[1]["_reason"] for d in dead)
    assert len(reasons) == 2
    assert any("no run 'no-such-run'" in r for r in reasons)
    assert any("no 'run' field" in r for r in reasons)


def test_run_that_kills_its_worker_fails_after_max_attempts(world: World) -> None:
    with Client(settings=world.settings()) as c:
        run = c.enqueue("suicide")
        for _ in range(10):
            if c.status(run.id).final:
                break
            p = world.worker(OUTLAST_MAX_ATTEMPTS="3")
            while p.poll() is None and not c.status(run.id).final:
                time.sleep(0.1)
        done = c.wait(run.id, timeout=10)
    assert done.state == "failed"
    assert done.reason == "crashed its worker 3 times"
    assert executions(world, run.id) == 3


def test_sigterm_hands_the_run_over_before_the_lease_expires(world: World) -> None:
    env = {"OUTLAST_LEASE_TTL": "30", "OUTLAST_GRACE": "0.5"}
    with Client(settings=world.settings()) as c:
        run = c.enqueue("slow", {"seconds": 3})
        a = world.worker(**env)
        wait_for(lambda: executions(world, run.id, f"start:{a.pid}"), what="worker A to start the run")
        b = world.worker(**env)
        time.sleep(0.5)
        began = time.monotonic()
        a.send_signal(signal.SIGTERM)
        assert a.wait(20) == 0
        done = c.wait(run.id, timeout=25)
        took = time.monotonic() - began
    assert done.state == "succeeded" and done.result["pid"] == b.pid
    assert took < 15, f"handed over in {took:.1f}s; the lease TTL is 30s"
    assert world.sql("SELECT count(*) FROM events WHERE run_id = %s AND kind = 'handed_over'", run.id) == [
        (1,)
    ]
    assert os.getpid() != b.pid


def test_processes_share_the_queue_and_stop_together(world: World) -> None:
    pool = world.worker("tests.apps.basic:app", "--processes", "2", "--concurrency", "2")
    with Client(settings=world.settings()) as c:
        ids = [c.enqueue("slow", {"seconds": 0.5, "tag": str(i)}).id for i in range(8)]
        for rid in ids:
            assert c.wait(rid, timeout=60).state == "succeeded"
    pids = {
        what.split(":")[1] for (what,) in world.sql("SELECT what FROM executions WHERE what LIKE 'end:%%'")
    }
    assert len(pids) == 2, f"runs were served by {pids}"
    pool.send_signal(signal.SIGTERM)
    assert pool.wait(30) == 0
