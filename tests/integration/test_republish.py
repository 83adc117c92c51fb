"""The sweeper re-publishes a run no stream entry will deliver, and only such a run: during a long
drain, a queued run whose entry still waits undelivered in its stream is left alone however long it
waited (re-publishing it costs a second entry and a refused claim, and puts nothing ahead), while a
run whose entry was deleted, or never added, is re-published after ``republish_after``."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
import structlog

from outlast import Client
from outlast.producer.client import AsyncClient
from outlast.queue import undelivered
from outlast.worker.sweeper import Sweeper
from tests.conftest import World, wait_for

pytestmark = pytest.mark.both_redis  # the queue layer: on Redis 6.2 (embedded) and 7 (PATH)

BACKLOG = 40  # slow runs, 0.15 s each, two at a time: a drain of about 3 s
REPUBLISH_AFTER = 0.5


def entries_added(world: World) -> int | None:
    """How many entries the queue's stream was ever given (deleted ones included); None on a Redis
    before 7.0, which does not count them."""
    info: dict[str, Any] = world.redis().xinfo_stream(f"{world.prefix}:{{default}}:runs")
    return int(info["entries-added"]) if "entries-added" in info else None


def republished(world: World) -> list[str]:
    return [rid for e in world.logged("sweeper.republished") for rid in e["runs"]]


def test_a_slow_drain_republishes_only_the_run_whose_entry_was_lost(world: World) -> None:
    r = world.redis()
    stream = f"{world.prefix}:{{default}}:runs"
    with Client(settings=world.settings()) as c:
        lost = c.enqueue("slow", {"seconds": 0.15, "tag": "lost"}).id
        time.sleep(0.2)  # the backlog is published after the lost entry, in later milliseconds
        backlog = [run.id for run in c.enqueue_many("slow", [{"seconds": 0.15}] * BACKLOG)]
        # The first run's entry is lost before any worker saw it (deleted, as a trim would).
        [entry] = [eid for eid, f in r.xrange(stream) if f["run"] == lost]
        assert r.xdel(stream, entry) == 1
        world.worker(
            "tests.apps.basic:app",
            "-c",
            "2",
            OUTLAST_REPUBLISH_AFTER=str(REPUBLISH_AFTER),
            OUTLAST_SWEEP_INTERVAL="0.2",
        )
        wait_for(
            lambda: world.sql("SELECT count(*) FROM runs WHERE state = 'succeeded'") == [(BACKLOG + 1,)],
            timeout=120,
            what="every run to succeed",
        )
    # The backlog waited for seconds past republish_after, each run's entry in the stream all along:
    # none was re-published. The lost one was, once.
    extra = [backlog.index(r) if r in backlog else r for r in republished(world)]
    assert republished(world) == [lost], f"{len(republished(world))} runs re-published: {extra}"
    assert entries_added(world) in (BACKLOG + 2, None)
    ran = world.sql("SELECT run_id, count(*) FROM executions WHERE left(what, 4) = 'end:' GROUP BY run_id")
    assert sorted(ran) == sorted((rid, 1) for rid in [lost, *backlog])


async def test_a_run_published_after_the_streams_last_entry_has_no_entry(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A producer that died between its commit and its XADD, on an idle queue: every entry was
    delivered, and the run was stamped after the newest one. Its entry was never added: it is
    re-published after ``republish_after``, not taken for one still on its way."""
    s = world.settings(republish_after=0.3)
    c = AsyncClient(settings=s)
    await c.open()
    try:
        await c.queue.ensure_group("default")
        first = (await c.enqueue("echo", {})).id
        [delivered] = await c.queue.read("default", "reader", 10, None)
        assert delivered.run_id == first
        world.sql("UPDATE runs SET state = 'succeeded', finished_at = now() WHERE id = %s", first)

        async def dead_producer(entries: list[tuple[str, str, str]]) -> None:
            return None

        monkeypatch.setattr(c.queue, "publish_many", dead_producer)
        await asyncio.sleep(0.1)  # stamped clearly after the newest entry (by more than the clocks' reading)
        orphan = (await c.enqueue("echo", {})).id
        monkeypatch.undo()
        sweeper = Sweeper(c.store, c.queue, s, ["default"])
        await asyncio.sleep(0.4)
        await sweeper.sweep(structlog.get_logger())
        stream = c.queue.stream("default")
        added = [f[b"run"].decode() for _, f in await c.queue.redis.xrange(stream)]
        assert added == [first, orphan]
    finally:
        await c.close()


async def test_runs_past_the_entries_read_are_known_by_the_clock(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only a few entries past the delivered point are read (here 3): the runs of the later ones
    are known to wait by their stamp, later than the delivered entry's by Redis's clock. Those
    stamped with it (one batch) are known by name, as are those given and not acknowledged."""
    monkeypatch.setattr(undelivered, "NEAR_MAX", 3)
    s = world.settings(republish_after=0.3)
    c = AsyncClient(settings=s)
    await c.open()
    try:
        await c.queue.ensure_group("default")
        batches = []
        for _ in range(3):
            batches.append([run.id for run in await c.enqueue_many("echo", [{}] * 5)])
            await asyncio.sleep(0.2)
        given = await c.queue.read("default", "reader", 2, None)
        assert [d.run_id for d in given] == batches[0][:2]
        done = "UPDATE runs SET state = 'succeeded', finished_at = now() WHERE id = ANY(%s)"
        world.sql(done, batches[0][:2])
        waiting = await c.queue.waiting(["default"])
        # The two given (not acknowledged yet) and the rest of their batch, not the later batches.
        assert waiting.runs == batches[0]
        await asyncio.sleep(0.4)
        await Sweeper(c.store, c.queue, s, ["default"]).sweep(structlog.get_logger())
        assert await c.queue.redis.xlen(c.queue.stream("default")) == 15  # nothing re-published
    finally:
        await c.close()


async def test_an_idle_sweep_does_not_ask_redis_what_waits(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The streams are read (a script a queue) only when a queued run went unseen for
    ``republish_after``: not on a sweep with nothing due, nor with a run queued a moment ago.
    Once a run waited that long, they are, and a run whose entry waits is left alone."""
    s = world.settings(republish_after=0.3)
    c = AsyncClient(settings=s)
    await c.open()
    try:
        await c.queue.ensure_group("default")
        asked: list[list[str]] = []
        read = c.queue.waiting

        async def counted(queues: list[str]) -> undelivered.Waiting:
            asked.append(queues)
            return await read(queues)

        monkeypatch.setattr(c.queue, "waiting", counted)
        sweeper = Sweeper(c.store, c.queue, s, ["default"])
        log = structlog.get_logger()
        await sweeper.sweep(log)  # nothing at all
        await c.enqueue("echo", {})
        await sweeper.sweep(log)  # a run queued a moment ago: not due by age
        assert asked == []
        await asyncio.sleep(0.4)
        await sweeper.sweep(log)  # unseen past republish_after: the streams say its entry waits
        assert asked == [["default"]]
        assert await c.queue.redis.xlen(c.queue.stream("default")) == 1  # nothing re-published
    finally:
        await c.close()


async def test_a_queued_run_is_not_due_by_age_when_none_was_found_unseen(world: World) -> None:
    """``unseen`` looks before ``due`` stamps: a queued run that went unseen for
    ``republish_after`` in between is left for the next pass (Redis was not asked about it), not
    re-published while its entry may still wait."""
    s = world.settings(republish_after=0.3)
    c = AsyncClient(settings=s)
    await c.open()
    try:
        run = (await c.enqueue("echo", {})).id
        cutoff, queued = await c.store.sweeps.unseen(0.3)
        assert not queued
        await asyncio.sleep(0.4)
        assert await c.store.sweeps.due(0.3, 10, cutoff, queued=False) == []
        cutoff, queued = await c.store.sweeps.unseen(0.3)
        assert queued
        assert await c.store.sweeps.due(0.3, 10, cutoff) == [(run, "default", "normal")]
    finally:
        await c.close()


async def test_a_run_on_a_queue_no_worker_serves_is_republished_once_not_every_pass(world: World) -> None:
    """No worker serves the queue, so its stream has no consumer group for Redis to say what it
    delivered: the sweeper re-publishes the run once (it did not know the queue), makes the group
    from the stream's start, and from then on the run's entry is seen waiting there, however many
    times ``republish_after`` passes."""
    s = world.settings(republish_after=0.3)
    c = AsyncClient(settings=s)
    await c.open()
    try:
        run = (await c.enqueue("echo", {}, queue="nobody")).id
        sweeper = Sweeper(c.store, c.queue, s, ["default"])
        log = structlog.get_logger()
        for _ in range(5):
            await asyncio.sleep(0.4)
            await sweeper.sweep(log)
        stream = c.queue.stream("nobody")
        added = [f[b"run"].decode() for _, f in await c.queue.redis.xrange(stream)]
        assert added == [run, run], f"{len(added)} entries for one run"
        assert (await c.status(run)).state == "queued"
    finally:
        await c.close()


async def test_a_deadline_passed_in_the_backlog_adds_no_second_entry(world: World) -> None:
    """Runs whose deadline passes while their entries wait in a backlog are not published again by
    the deadline sweep: the queue's depth (the charts') counts each run once, and the sweep ends
    them ``timed_out`` once ``republish_after`` has passed beyond the deadline, no worker having
    come for them. A run held by its tenant's window has no entry: that one is published."""
    s = world.settings(republish_after=0.6, tenant_window=1)
    c = AsyncClient(settings=s)
    await c.open()
    try:
        await c.queue.ensure_group("default")
        backlog = [run.id for run in await c.enqueue_many("echo", [{}] * 5, deadline=0.2)]
        first, held = [r.id for r in await c.enqueue_many("echo", [{}] * 2, deadline=0.2, tenant="t")]
        assert (await c.queue.depth("default"))[0] == 6  # the tenant's second run is held
        await asyncio.sleep(0.3)
        sweeper = Sweeper(c.store, c.queue, s, ["default"])
        await sweeper.sweep(structlog.get_logger())
        depth, _age = await c.queue.depth("default")
        assert depth == 7  # the five and the tenant's first, once each; its held run, once
        assert await c.queue.redis.xlen(c.queue.stream("default")) == 7
        await asyncio.sleep(0.6)
        await sweeper.sweep(structlog.get_logger())
        states = dict(world.sql("SELECT id, state FROM runs"))
        assert {states[r] for r in [*backlog, first, held]} == {"timed_out"}
        assert await c.queue.redis.xlen(c.queue.stream("default")) == 7
    finally:
        await c.close()
