"""Priorities under load: a worker serves a queue's levels 8:3:1 while all have work, so high goes
first and low still progresses while high is saturated; every path that puts a run back in the
queue (reclaim, hand-over, the sweeper) keeps its level."""

from __future__ import annotations

import asyncio
import itertools
import signal

import pytest
import structlog

from outlast import Client
from outlast.errors import InvalidInput
from outlast.producer.client import AsyncClient
from outlast.queue.streams import LEVELS
from outlast.worker.loop import Worker
from outlast.worker.sweeper import Sweeper
from tests.apps import basic
from tests.conftest import World, wait_for

pytestmark = pytest.mark.both_redis  # the queue layer: on Redis 6.2 (embedded) and 7 (PATH)


def starts(world: World) -> list[str]:
    """Each run's level, in the order the runs started."""
    rows = world.sql(
        "SELECT r.priority FROM executions e JOIN runs r ON r.id = e.run_id "
        "WHERE e.what = 'echo' ORDER BY e.id"
    )
    return [p for (p,) in rows]


def test_levels_are_served_8_3_1_and_low_is_never_starved(world: World) -> None:
    with Client(settings=world.settings()) as c:
        # A backlog on every level before the worker comes: high alone could keep it busy.
        for level, n in (("low", 40), ("normal", 90), ("high", 240)):
            c.enqueue_many("echo", [{"i": i} for i in range(n)], priority=level)
        world.worker("tests.apps.basic:app", "-c", "4")
        wait_for(lambda: len(starts(world)) == 370, timeout=120, what="every run to start")
    order = starts(world)
    first = order[:120]  # every level still had a backlog: 8:3:1 of these, give or take a round
    counts = {level: first.count(level) for level in LEVELS}
    assert 70 <= counts["high"] <= 90 and 22 <= counts["normal"] <= 38 and 5 <= counts["low"] <= 15, counts
    # While high was saturated, low kept starting: never more than a few rounds without one.
    lows = [i for i, level in enumerate(order[:240]) if level == "low"]
    assert max(b - a for a, b in itertools.pairwise([0, *lows])) <= 30, lows
    # Once high and normal ran out (together: 240 at 8 in 12, 90 at 3 in 12), low took every place.
    assert order[-5:] == ["low"] * 5, order[-20:]
    assert world.sql("SELECT count(*) FROM runs WHERE state = 'succeeded'") == [(370,)]


def test_a_killed_workers_runs_are_reclaimed_on_every_level(world: World) -> None:
    with Client(settings=world.settings()) as c:
        runs = {level: c.enqueue("slow", {"seconds": 3, "tag": level}, priority=level).id for level in LEVELS}
        a = world.worker()
        for rid in runs.values():
            wait_for(lambda rid=rid: c.status(rid).state == "running", timeout=30, what=f"A to start {rid}")
        a.send_signal(signal.SIGKILL)
        b = world.worker()
        for rid in runs.values():
            done = c.wait(rid, timeout=60)
            assert done.state == "succeeded" and done.result["pid"] == b.pid


def test_a_handed_over_run_keeps_its_level(world: World) -> None:
    with Client(settings=world.settings()) as c:
        rid = c.enqueue("slow", {"seconds": 5}, priority="low").id
        a = world.worker()
        wait_for(lambda: c.status(rid).state == "running", timeout=30, what="A to start the run")
        a.send_signal(signal.SIGTERM)  # grace 1 s: the run is handed over, published again
        assert a.wait(30) == 0
        r = world.redis()
        low = f"{world.prefix}:{{default}}:runs:low"
        assert r.xlen(low) == 1 and r.xlen(f"{world.prefix}:{{default}}:runs") == 0
        assert c.status(rid).state == "queued"


async def test_the_sweeper_republishes_each_run_on_its_level(world: World) -> None:
    c = AsyncClient(settings=world.settings())
    await c.open()
    try:
        ids = {level: (await c.enqueue("echo", {}, priority=level)).id for level in LEVELS}
        r = world.redis()
        r.delete(*[c.queue.stream("default", level) for level in LEVELS])  # lost, as after a flush
        sweeper = Sweeper(c.store, c.queue, world.settings(), ["default"])
        await sweeper.republish(structlog.get_logger(), after=0.0)
        for level in LEVELS:
            assert [f["run"] for _, f in r.xrange(c.queue.stream("default", level))] == [ids[level]]
    finally:
        await c.close()


def test_a_priority_that_is_no_level_is_refused_in_one_line(world: World) -> None:
    bad = world.cli("enqueue", "echo", "--priority", "urgent")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    with Client(settings=world.settings()) as c, pytest.raises(InvalidInput, match="no priority 'urgent'"):
        c.enqueue("echo", priority="urgent")


async def test_a_worker_of_one_place_runs_entries_of_every_level_one_at_a_time(world: World) -> None:
    c = AsyncClient(settings=world.settings())
    await c.open()
    try:
        worker = world.worker("tests.apps.basic:app", "-c", "1")
        while not world.sql("SELECT count(*) FROM workers")[0][0]:
            await asyncio.sleep(0.1)
        await asyncio.sleep(0.5)  # idle: its read waits on every level at once
        for level in LEVELS:
            await c.store.runs.insert_run(
                id=f"r-{level}",
                workflow="slow",
                queue="default",
                input={"seconds": 0.5, "tag": level},
                input_hash="h",
                program=None,
                deadline_in=None,
                priority=level,
            )
        with world.redis().pipeline(transaction=True) as p:  # one entry on each level, at once
            for level in LEVELS:
                p.xadd(c.queue.stream("default", level), {"run": f"r-{level}"})
            p.execute()
        for level in LEVELS:
            assert (await c.wait(f"r-{level}", timeout=30)).state == "succeeded"
    finally:
        await c.close()
    # Arrived together on three levels (read at once where Redis serves a waiting read from every
    # level): started one after the other, never two at once.
    what = [w for (w,) in world.sql("SELECT what FROM executions ORDER BY id")]
    assert what == [f"start:{worker.pid}", f"end:{worker.pid}"] * 3


async def test_entries_read_past_the_room_go_back_at_once_when_the_worker_stops(world: World) -> None:
    c = AsyncClient(settings=world.settings())
    await c.open()
    try:
        worker = Worker(basic.app, c.store, c.queue, world.settings(), ["default"])
        worker.name = "w1"
        await c.queue.ensure_group("default")
        for level in ("normal", "low"):
            await c.queue.publish("default", f"r-{level}", priority=level)
        # As a read that waits on every level can bring more than the room: held, not started.
        worker.state.read_ahead = await c.queue.read_any("default", "w1", 100)
        assert [d.priority for d in worker.state.read_ahead] == ["normal", "low"]
        await worker.intake.return_early()  # the worker stops
        r = world.redis()
        for level in ("normal", "low"):
            stream = c.queue.stream("default", level)
            assert r.xpending(stream, "workers")["pending"] == 0, level  # nothing left with w1
            assert [f["run"] for _, f in r.xrange(stream)] == [f"r-{level}"], level  # a new entry
    finally:
        await c.close()


def test_a_worker_serving_many_idle_queues_reads_each_of_them(world: World) -> None:
    """Twenty queues, each read blocking for at least 50 ms, take longer than the half second
    between two reclaims: a pass stops for the reclaim, and the next one reads on from the queue it
    did not reach. A run on the last queue still starts (it never would if each pass began again
    from the first)."""
    queues = [f"q{i:02d}" for i in range(20)]
    world.worker("tests.apps.basic:app", *itertools.chain.from_iterable(("-q", q) for q in queues))
    with Client(settings=world.settings()) as c:
        runs = [c.enqueue("echo", {"i": i}, queue=q).id for i, q in enumerate(queues[-3:])]
        for rid in runs:
            wait_for(lambda rid=rid: c.status(rid).state == "succeeded", timeout=60, what=f"{rid} to run")
