"""Delayed runs and schedules, with real worker processes on real Postgres and Redis.

Delayed runs: recorded ``queued`` with their start, never in a stream before it, published by a
sweeper at their time, run once, even after Redis lost everything. Counted in the world: the
``executions`` rows the workflows write, and the stream's length.
"""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from outlast import App, Client
from outlast._model import RunState
from outlast.testing import HarnessFactory, outlast_harness, outlast_servers
from tests.conftest import World, drop_keys, wait_for

__all__ = ["outlast_harness", "outlast_servers"]  # the fixtures, without the plugin installed


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
            assert timedelta(0) <= done.finished_at - start < timedelta(seconds=5)
        assert c.status(late.id).state == RunState.QUEUED and executions(world, late.id) == 0
        assert c.cancel(late.id).state == RunState.CANCELLED  # it never started: cancelled at once
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


def test_the_harness_advance_brings_a_delayed_run_to_its_start(outlast_harness: HarnessFactory) -> None:
    app = App()

    @app.workflow("hello")
    async def hello(run: Any, name: str) -> str:
        return f"hello {name}"

    h = outlast_harness(app)
    h.start_worker()
    run = h.client.enqueue("hello", {"name": "ada"}, delay=86400)
    time.sleep(1)
    assert h.client.status(run.id).state == RunState.QUEUED
    assert h.advance(86400) == [run.id]
    done = h.wait(run.id)
    assert done.result == "hello ada" and done.start_at is not None
    # the clock moved, not the run: its start is still a day after its creation (audit clock)
    assert done.start_at - done.created_at >= timedelta(seconds=86400)


# -- schedules -----------------------------------------------------------------------------------


def tick_runs(world: World, prefix: str) -> list[tuple[str, str, int]]:
    """(run id, state, executions) of every run of a schedule, by tick."""
    rows = world.sql(
        "SELECT r.id, r.state, (SELECT count(*) FROM executions e WHERE e.run_id = r.id) FROM runs r "
        "WHERE r.id LIKE %s ORDER BY r.id",
        prefix + "@%",
    )
    return [(r[0], r[1], int(r[2])) for r in rows]


def test_three_workers_and_restarts_make_exactly_one_run_per_tick(world: World) -> None:
    app = "tests.apps.scheduled:app"
    workers = [world.worker(app) for _ in range(3)]
    wait_for(lambda: len(tick_runs(world, "every-second")) >= 3, 30, what="the first ticks")
    workers[0].terminate()  # a restart: one goes (handing over), another comes
    workers[0].wait(15)
    world.worker(app)
    time.sleep(3)
    paused = world.cli("schedules", "--pause", "every-second")
    assert paused.returncode == 0 and paused.stdout.strip() == "schedule every-second paused", paused.stderr
    ticks = wait_for(
        lambda: (t := tick_runs(world, "every-second")) and all(s == "succeeded" for _, s, _ in t) and t,
        30,
        what="every tick's run to finish",
    )
    times = [datetime.strptime(rid.split("@")[1], "%Y-%m-%dT%H:%M:%SZ") for rid, _, _ in ticks]
    assert len(times) >= 5
    # every second from the first tick to the last has its run, and each ran once
    assert times == [times[0] + timedelta(seconds=i) for i in range(len(times))]
    assert [n for _, _, n in ticks] == [1] * len(ticks)
    assert world.sql("SELECT input FROM runs WHERE id = %s", ticks[0][0])[0][0] == {"from": "schedule"}
    time.sleep(2)  # paused: no tick is enqueued
    assert len(tick_runs(world, "every-second")) == len(ticks)


def test_ticks_missed_while_no_worker_was_up_follow_catch_up(world: World) -> None:
    # Declared by workers that then were all down for three hours and five minutes.
    for how in ("all", "latest", "none"):
        world.sql(
            "INSERT INTO schedules (name, workflow, queue, cron, tz, input, catch_up, last_tick) "
            "VALUES (%s, 'hourly', 'default', '0 * * * *', 'UTC', '{}', %s, now() - interval '185 minutes')",
            f"hourly-{how}",
            how,
        )
    world.worker("tests.apps.scheduled:catchup")
    wait_for(
        lambda: len(tick_runs(world, "hourly-all")) == 3 and len(tick_runs(world, "hourly-latest")) == 1,
        30,
        what="the catch-up runs",
    )
    time.sleep(1.5)  # more sweeps: nothing more
    every = tick_runs(world, "hourly-all")
    latest = tick_runs(world, "hourly-latest")
    assert len(every) == 3 and len(latest) == 1 and tick_runs(world, "hourly-none") == []
    assert latest[0][0].split("@")[1] == every[-1][0].split("@")[1]  # the newest missed tick
    runs = tick_runs(world, "hourly-%")
    assert len(runs) == 4
    wait_for(lambda: all(s == "succeeded" for _, s, _ in tick_runs(world, "hourly-%")), 30, what="runs")
    rows = world.sql(
        # The latest tick is about 30 minutes old, the one before it 90: an hour tells them apart
        # with room for a slow machine (31 minutes failed when a minute passed since the import).
        "SELECT name, cron, last_tick > now() - interval '60 minutes' FROM schedules ORDER BY name"
    )
    assert [r[0] for r in rows] == ["hourly-all", "hourly-latest", "hourly-none"]
    assert all(r[1] != "0 * * * *" for r in rows)  # the declaration in code replaced the cron
    assert all(r[2] for r in rows)  # every schedule moved past its missed ticks


def test_outlast_schedules_lists_pauses_resumes_and_triggers(world: World) -> None:
    world.worker("tests.apps.scheduled:catchup")
    wait_for(lambda: world.sql("SELECT count(*) FROM schedules")[0][0] == 3, 30, what="the declarations")
    listed = world.cli("schedules")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0].startswith("NAME") and len(lines) == 4
    assert all("hourly" in line and "active" in line for line in lines[1:])
    assert world.cli("schedules", "--pause", "hourly-all").returncode == 0
    listed = world.cli("schedules", "--json")
    rows = {r["name"]: r for r in json.loads(listed.stdout)}
    assert rows["hourly-all"]["paused"] and rows["hourly-all"]["next_tick"] is None
    assert rows["hourly-latest"]["next_tick"] is not None
    assert world.cli("schedules", "--resume", "hourly-all").returncode == 0
    assert not world.sql("SELECT paused FROM schedules WHERE name = 'hourly-all'")[0][0]
    triggered = world.cli("schedules", "--trigger", "hourly-none")
    assert triggered.returncode == 0 and triggered.stdout.startswith(
        "schedule hourly-none: run hourly-none@"
    ), triggered.stderr
    rid = triggered.stdout.split()[3]
    wait_for(lambda: executions(world, rid) == 1, 30, what="the triggered run")
    unknown = world.cli("schedules", "--pause", "nope")
    assert (
        unknown.returncode == 1 and unknown.stderr.count("\n") == 1 and "no schedule 'nope'" in unknown.stderr
    )
    both = world.cli("schedules", "--pause", "a", "--resume", "b")
    assert both.returncode == 2 and "one of" in both.stderr


def test_ticks_of_a_total_outage_are_enqueued_on_restart_with_catch_up_all(world: World) -> None:
    app = "tests.apps.scheduled:app"
    first = [world.worker(app) for _ in range(2)]
    wait_for(lambda: len(tick_runs(world, "every-second")) >= 2, 30, what="the first ticks")
    for p in first:  # every worker killed at once: nothing ticks for 3 s
        p.kill()
        p.wait(10)
    time.sleep(3)
    for _ in range(2):
        world.worker(app)
    time.sleep(3)
    assert world.cli("schedules", "--pause", "every-second").returncode == 0
    ticks = wait_for(
        lambda: (t := tick_runs(world, "every-second")) and all(s == "succeeded" for _, s, _ in t) and t,
        30,
        what="every tick's run to finish",
    )
    times = [datetime.strptime(rid.split("@")[1], "%Y-%m-%dT%H:%M:%SZ") for rid, _, _ in ticks]
    assert len(times) >= 8  # the ticks of the outage too: one run for every second, none twice
    assert times == [times[0] + timedelta(seconds=i) for i in range(len(times))]
    assert all(n >= 1 for _, _, n in ticks)  # (a body killed mid-way runs again: not a second run)


def test_a_schedule_that_cannot_tick_holds_up_nothing_else(world: World) -> None:
    world.worker("tests.apps.scheduled:catchup")
    wait_for(lambda: world.sql("SELECT count(*) FROM schedules")[0][0] == 3, 30, what="the declarations")
    world.sql("UPDATE schedules SET tz = 'Nowhere/Land', last_tick = now() - interval '3 hours'")
    c = client(world)
    try:
        run = c.enqueue("hourly", {}, delay=1)
        assert finished(c, run.id).state == RunState.SUCCEEDED  # the sweeper still publishes
    finally:
        c.close()
    wait_for(lambda: world.logged("schedule.broken", schedule="hourly-all"), 10, what="the warning")
    assert tick_runs(world, "hourly-%") == []


class QuietLog:
    def info(self, msg: str, **kw: Any) -> None:
        pass

    def warning(self, msg: str, **kw: Any) -> None:
        pass


async def test_a_ticks_run_is_recorded_with_its_apps_program(world: World) -> None:
    """A worker's scheduler records each tick's run with the program the app has for its workflow
    (not NULL, which the first worker of any program would claim): seen on the row before any
    worker claims it."""
    from outlast.queue import Queue
    from outlast.store import Store
    from outlast.worker.loop import Worker
    from tests.apps.scheduled import app

    s = world.settings()
    assert s.database_url and s.redis_url
    store = Store(s.database_url, s.schema)
    await store.open()
    queue = Queue(s.redis_url, s.prefix)
    try:
        w = Worker(app, store, queue, s, ["default"])  # built, never run: nothing claims the ticks
        deadline = time.monotonic() + 10
        while not tick_runs(world, "every-second") and time.monotonic() < deadline:
            await w.sweeper.scheduler.tick(QuietLog())
            await asyncio.sleep(0.3)
        rows = world.sql("SELECT state, program FROM runs WHERE id LIKE %s", "every-second@%")
        assert rows, "no tick was enqueued"
        expected = app.programs()["tick"]
        assert expected is not None
        assert rows == [("queued", expected)] * len(rows)
    finally:
        await store.close()
        await queue.close()
