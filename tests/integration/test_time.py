"""Delayed runs and schedules, with real worker processes on real Postgres and Redis.

Delayed runs: recorded ``queued`` with their start, never in a stream before it, published by a
sweeper at their time, run once, even after Redis lost everything. Counted in the world: the
``executions`` rows the workflows write, and the stream's length.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

from outlast import Client
from outlast.model import RunState
from tests.conftest import World, drop_keys, wait_for


def client(world: World) -> Client:
    return Client(settings=world.settings())


def executions(world: World, run_id: str) -> int:
    return int(world.sql("SELECT count(*) FROM executions WHERE run_id = %s", run_id)[0][0])


def stream_length(world: World, queue: str = "default") -> int:
    r = world.redis()
    try:
        return int(r.xlen(f"{world.prefix}:{{{queue}}}:runs"))
    finally:
        r.close()


def finished(c: Client, run_id: str) -> Any:
    return wait_for(lambda: (run := c.status(run_id)).final and run, 30, what=f"run {run_id} to finish")


def test_a_delayed_run_is_not_delivered_before_its_time_and_runs_once_at_it(world: World) -> None:
    c = client(world)
    try:
        runs = c.enqueue_many("echo", [{"n": i} for i in range(20)], delay=4)
        late = c.enqueue("echo", {"n": "late"}, start_at=datetime.now(UTC) + timedelta(hours=1))
        assert all(r.state == RunState.QUEUED and r.start_at is not None for r in [*runs, late])
        assert stream_length(world) == 0  # recorded, not handed out
        # with republish_after at 30 s, only the publication at its time can deliver a run in time
        world.worker(OUTLAST_REPUBLISH_AFTER="30")
        world.worker(OUTLAST_REPUBLISH_AFTER="30")
        start = runs[0].start_at
        assert start is not None
        while datetime.now(UTC) < start - timedelta(seconds=0.5):
            assert sum(executions(world, r.id) for r in runs) == 0, "a run was executed before its time"
            time.sleep(0.1)
        for r in runs:
            done = finished(c, r.id)
            assert done.state == RunState.SUCCEEDED
            assert executions(world, r.id) == 1
            # published by a sweeper at its time (it sweeps every 0.3 s here)
            assert timedelta(0) <= done.finished_at - start < timedelta(seconds=3)
        assert c.status(late.id).state == RunState.QUEUED and executions(world, late.id) == 0
    finally:
        c.close()


def test_a_delayed_run_survives_redis_losing_its_data(world: World) -> None:
    c = client(world)
    try:
        run = c.enqueue("echo", {"n": 1}, delay=3)
        drop_keys(world)  # every key of this test, the data-loss marker too
        world.worker()
        done = finished(c, run.id)
        assert done.state == RunState.SUCCEEDED and executions(world, run.id) == 1
        assert run.start_at is not None and done.finished_at >= run.start_at
    finally:
        c.close()


def test_a_delayed_run_entry_delivered_early_is_not_claimed(world: World) -> None:
    """An entry that reaches a worker before the run's time (e.g. a dead letter requeued) is
    dropped: the claim refuses, the run is not parked, and the sweeper publishes it at its time."""
    c = client(world)
    try:
        run = c.enqueue("echo", {"n": 1}, delay=4)
        r = world.redis()
        r.xadd(f"{world.prefix}:{{default}}:runs", {"run": run.id})
        r.close()
        world.worker()
        time.sleep(2)
        early = c.status(run.id)
        assert early.state == RunState.QUEUED and early.reason is None and executions(world, run.id) == 0
        assert finished(c, run.id).state == RunState.SUCCEEDED and executions(world, run.id) == 1
    finally:
        c.close()


def test_enqueue_at_and_in_from_the_cli_and_status_says_when_it_starts(world: World) -> None:
    out = world.cli("enqueue", "echo", "--in", "1h", "--run-id", "later")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("run later queued, starts at ")
    shown = world.cli("status", "later")
    assert "starts at" in shown.stdout, shown.stdout
    at = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    assert world.cli("enqueue", "echo", "--at", at, "--run-id", "tomorrow").returncode == 0
    row = world.sql("SELECT start_at, deadline FROM runs WHERE id = 'tomorrow'")[0]
    assert abs((row[0] - datetime.fromisoformat(at)).total_seconds()) < 0.001
    naive = world.cli("enqueue", "echo", "--at", "2030-01-01T09:00")
    assert naive.returncode == 2 and naive.stderr.count("\n") == 1, naive.stderr
    assert "with its zone" in naive.stderr and "Traceback" not in naive.stderr
    both = world.cli("enqueue", "echo", "--at", at, "--in", "5m")
    assert both.returncode == 2 and "not both" in both.stderr


def test_a_delayed_runs_deadline_counts_from_its_start(world: World) -> None:
    c = client(world)
    try:
        run = c.enqueue("echo", {}, delay=3600, deadline=60)
        assert run.start_at is not None and run.deadline is not None
        assert run.deadline - run.start_at == timedelta(seconds=60)
    finally:
        c.close()
