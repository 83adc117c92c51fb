"""The supervised pool (`outlast worker --processes P`) under real failures: a child killed with
SIGKILL is replaced and every run still finishes; children that keep dying at start make the
pool exit non-zero; SIGTERM to the pool hands the runs over; a child that outlives its bound
after SIGTERM is killed."""

from __future__ import annotations

import dataclasses
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from outlast import Client
from outlast.errors import ConfigError
from outlast.worker.loop import CLOSE_WITHIN, STOP_SLACK
from outlast.worker.pool import KILL_MARGIN, Pool, load_app, run_worker
from tests.conftest import World, wait_for

pytestmark = pytest.mark.crash


def live_pids(world: World) -> set[int]:
    """The pids of the workers whose heartbeat record is fresh (the pool's children)."""
    rows = world.sql("SELECT pid FROM workers WHERE last_beat > now() - interval '6 seconds'")
    return {pid for (pid,) in rows}


def test_a_killed_child_is_replaced_and_every_run_finishes(world: World) -> None:
    pool = world.worker("tests.apps.basic:app", "--processes", "2", "--concurrency", "2")
    first = wait_for(lambda: len(live_pids(world)) == 2 and live_pids(world), what="two children")
    with Client(settings=world.settings()) as c:
        ids = [c.enqueue("slow", {"seconds": 1, "tag": str(i)}).id for i in range(10)]
        wait_for(lambda: world.sql("SELECT count(*) FROM executions")[0][0] > 0, what="a run to start")
        victim = min(first)
        os.kill(victim, signal.SIGKILL)
        replaced = wait_for(lambda: (live_pids(world) - first) or None, timeout=30, what="a new child")
        for rid in ids:
            assert c.wait(rid, timeout=60).state == "succeeded"
    assert len(replaced) == 1 and victim not in replaced
    assert world.logged("pool.process_exited", pid=victim, how="signal SIGKILL")
    assert world.sql("SELECT count(DISTINCT run_id) FROM executions WHERE what LIKE 'end:%%'") == [(10,)]
    assert pool.poll() is None  # the pool itself goes on
    pool.send_signal(signal.SIGTERM)
    assert pool.wait(30) == 0
    # Clean stops delete their records; the killed child's is left, to be shown as gone.
    assert world.sql("SELECT pid FROM workers") == [(victim,)]


def test_children_dying_at_start_make_the_pool_exit_non_zero(world: World) -> None:
    began = time.monotonic()
    pool = world.worker("tests.apps.child_fails:app", "--processes", "2")
    assert pool.wait(90) == 1
    took = time.monotonic() - began
    lines = [ln for ln in world.logs().splitlines() if "keep dying" in ln]
    assert len(lines) == 1 and "outlast: error: worker processes keep dying at start: 5 in a row" in lines[0]
    assert "exit code 1" in lines[0]
    assert len(world.logged("pool.process_exited", served=False)) >= 4
    assert "refuses to load in a worker process" in world.logs()  # each child's own reason, one line
    assert "Traceback" not in world.logs()
    assert took < 60


def test_a_pool_without_the_secret_key_its_app_needs_exits_at_once(world: World) -> None:
    pool = world.worker("tests.apps.secret:app", "--processes", "2", OUTLAST_SECRET_KEY="")
    assert pool.wait(30) == 2  # a configuration error, as with one process
    lines = world.logs().strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("outlast: error: OUTLAST_SECRET_KEY is not set"), lines


async def test_a_child_without_the_secret_key_is_not_ready(world: World) -> None:
    """What the pool counts: a child that cannot build its worker never says it is ready."""
    ready: list[bool] = []
    with pytest.raises(ConfigError, match="OUTLAST_SECRET_KEY is not set"):
        await run_worker(
            load_app("tests.apps.secret:app"),
            dataclasses.replace(world.settings(), secret_key=None),
            ["default"],
            False,
            lambda: ready.append(True),
        )
    assert ready == []


def test_sigterm_to_the_pool_hands_the_runs_over(world: World) -> None:
    # The run outlasts the other worker's start however loaded the machine (it sleeps again from
    # its start once handed over), and the lease (60 s) outlasts both: only a hand-over is that fast.
    env = {"OUTLAST_LEASE_TTL": "60", "OUTLAST_GRACE": "0.5"}
    pool = world.worker("tests.apps.basic:app", "--processes", "2", **env)
    wait_for(lambda: len(live_pids(world)) == 2, what="two children")
    with Client(settings=world.settings()) as c:
        run = c.enqueue("slow", {"seconds": 15})
        wait_for(lambda: world.sql("SELECT count(*) FROM executions")[0][0] > 0, what="the run to start")
        other = world.worker("tests.apps.basic:app", **env)
        wait_for(lambda: other.pid in live_pids(world), what="the other worker")
        began = time.monotonic()
        pool.send_signal(signal.SIGTERM)
        assert pool.wait(20) == 0
        done = c.wait(run.id, timeout=90)
        took = time.monotonic() - began
    assert done.state == "succeeded" and done.result["pid"] == other.pid
    assert took < 45, f"handed over and run again (15 s) in {took:.1f}s; the lease TTL is 60s"
    assert world.sql("SELECT count(*) FROM events WHERE run_id = %s AND kind = 'handed_over'", run.id) == [
        (1,)
    ]
    assert not world.logged("pool.process_exited")  # nothing restarted while stopping
    assert world.sql("SELECT pid FROM workers") == [(other.pid,)]


def test_children_stop_cleanly_when_the_pool_is_killed(world: World) -> None:
    pool = world.worker("tests.apps.basic:app", "--processes", "2")
    children = wait_for(lambda: len(live_pids(world)) == 2 and live_pids(world), what="two children")
    pool.send_signal(signal.SIGKILL)
    pool.wait(10)
    # Each child sees its pool gone, hands over and deletes its record, as on SIGTERM.
    wait_for(lambda: world.sql("SELECT count(*) FROM workers") == [(0,)], timeout=20, what="clean stops")
    for pid in children:
        wait_for(lambda p=pid: not _alive(p), timeout=10, what=f"child {pid} to exit")


def _deaf(listening: Any) -> None:
    """A child stuck past its stop: SIGTERM ignored."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    listening.set()
    time.sleep(120)


@pytest.mark.timeout(60)
def test_a_child_outliving_its_bound_after_sigterm_is_killed(world: World) -> None:
    pool = Pool("tests.apps.basic:app", world.settings().with_(grace=0.5), [], 1)
    deaf = pool.ctx.Event()
    child = pool.ctx.Process(target=_deaf, args=(deaf,))
    child.start()
    pool.places[0].process = child
    assert deaf.wait(30)
    began = time.monotonic()
    with capture_logs() as logs:
        pool._stop(signal.SIGTERM)
    took = time.monotonic() - began
    bound = 0.5 + STOP_SLACK + CLOSE_WITHIN + KILL_MARGIN
    assert child.exitcode == -signal.SIGKILL
    assert bound <= took < bound + 1.0, f"stopped in {took:.1f}s, its bound {bound:g}s"
    assert [e for e in logs if e["event"] == "pool.process_killed"] == [
        {"event": "pool.process_killed", "pid": child.pid, "after": bound, "log_level": "warning"}
    ]


def _alive(pid: int) -> bool:
    """Running (not exited, nor a zombie waiting for whoever adopted it to reap it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
