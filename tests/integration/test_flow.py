"""The foundation end to end: producer → Redis Streams → worker → Postgres, with real servers."""

from __future__ import annotations

import asyncio

import pytest

from outlast import AsyncClient, InvalidInput, RunConflict
from outlast.queue import Queue
from outlast.store import Store
from outlast.worker.loop import Worker
from tests.apps.basic import app
from tests.conftest import World


async def start_worker(world: World, **kw: object) -> tuple[Worker, asyncio.Task[None]]:
    s = world.settings(**kw)
    assert s.database_url and s.redis_url
    store = Store(s.database_url, s.schema)
    await store.open()
    w = Worker(app, store, Queue(s.redis_url, s.prefix), s, ["default"])
    return w, asyncio.create_task(w.run())


async def stop_worker(w: Worker, task: asyncio.Task[None]) -> None:
    w.stop()
    await task
    await w.store.close()
    await w.queue.close()


async def test_enqueue_runs_to_succeeded(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OUTLAST_DATABASE_URL", world.database_url)
    monkeypatch.setenv("OUTLAST_SCHEMA", world.schema)
    async with AsyncClient(settings=world.settings()) as c:
        run = await c.enqueue("echo", {"a": 1})
        assert run.state == "queued"
        w, task = await start_worker(world)
        done = await c.wait(run.id, timeout=20)
        await stop_worker(w, task)
    assert done.state == "succeeded"
    assert done.result == {"echo": {"a": 1}}
    assert world.sql("SELECT count(*) FROM executions WHERE run_id = %s", run.id) == [(1,)]


async def test_enqueue_is_idempotent_on_run_id(world: World) -> None:
    async with AsyncClient(settings=world.settings()) as c:
        a = await c.enqueue("echo", {"a": 1}, run_id="same")
        b = await c.enqueue("echo", {"a": 1}, run_id="same")
        assert a.id == b.id == "same"
        assert world.sql("SELECT count(*) FROM runs") == [(1,)]
        with pytest.raises(RunConflict, match="'same'"):
            await c.enqueue("echo", {"a": 2}, run_id="same")
        with pytest.raises(RunConflict, match="workflow"):
            await c.enqueue("slow", {"a": 1}, run_id="same")


async def test_enqueue_with_an_existing_run_id_and_another_tenant_or_priority_is_refused(
    world: World,
) -> None:
    async with AsyncClient(settings=world.settings()) as c:
        await c.enqueue("echo", {"a": 1}, run_id="t", tenant="a", priority="high")
        same = await c.enqueue("echo", {"a": 1}, run_id="t", tenant="a", priority="high")
        assert (same.tenant, same.priority) == ("a", "high")
        with pytest.raises(RunConflict, match=r"run 't' already exists with a different tenant \('a'\)"):
            await c.enqueue("echo", {"a": 1}, run_id="t", tenant="b", priority="high")
        with pytest.raises(RunConflict, match=r"tenant \('a'\)"):  # none given is another tenant too
            await c.enqueue("echo", {"a": 1}, run_id="t", priority="high")
        with pytest.raises(RunConflict, match=r"different priority \('high'\)"):
            await c.enqueue("echo", {"a": 1}, run_id="t", tenant="a")
        with pytest.raises(RunConflict, match=r"tenant \('a'\)"):
            await c.enqueue_many("echo", [{"a": 1}], run_ids=["t"], tenant="b", priority="high")
        await c.enqueue("echo", {}, run_id="u")
        with pytest.raises(RunConflict, match=r"different tenant \(none\)"):
            await c.enqueue("echo", {}, run_id="u", tenant="b")
    assert world.sql("SELECT id, tenant, priority FROM runs ORDER BY id") == [
        ("t", "a", "high"),
        ("u", None, "normal"),
    ]


async def test_unknown_workflow_is_refused_or_waits_never_dropped(world: World) -> None:
    from outlast import UnknownWorkflow

    async with AsyncClient(settings=world.settings(), app=app) as with_app:
        with pytest.raises(UnknownWorkflow, match="unknown workflow 'nope'"):
            await with_app.enqueue("nope", {})
    async with AsyncClient(settings=world.settings()) as c:
        run = await c.enqueue("nope", {})
        w, task = await start_worker(world)
        await asyncio.sleep(1.5)  # seen (and republished after 1 s) by a worker that does not know it
        still = await c.status(run.id)
        await stop_worker(w, task)
    assert (still.state, still.attempts) == ("queued", 0)  # another app's worker may take it later


async def test_enqueue_many_commits_together_and_publishes_in_one_go(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OUTLAST_DATABASE_URL", world.database_url)  # the echo tool's table
    monkeypatch.setenv("OUTLAST_SCHEMA", world.schema)
    async with AsyncClient(settings=world.settings()) as c:
        with pytest.raises(InvalidInput):  # one bad input: nothing at all is written
            await c.enqueue_many("echo", [{"i": 1}, {"i": float("nan")}])
        assert world.sql("SELECT count(*) FROM runs") == [(0,)]
        await c.open()
        commits = c.store.writer.commits
        runs = await c.enqueue_many("echo", [{"i": i} for i in range(600)])
        assert len({r.id for r in runs}) == 600
        assert c.store.writer.commits - commits <= 6  # shared commits, not one per run
    assert world.sql("SELECT count(*) FROM events WHERE kind = 'enqueued'") == [
        (600,)
    ]  # in the row's statement
    r = world.redis()
    assert r.xlen(f"{world.prefix}:{{default}}:runs") == 600
    r.close()
    async with AsyncClient(settings=world.settings()) as c:
        w, task = await start_worker(world, concurrency=64)
        for run in runs[::60]:
            assert (await c.wait(run.id, timeout=60)).state == "succeeded"
        await stop_worker(w, task)


async def test_enqueue_many_with_run_ids_is_safe_to_retry(world: World) -> None:
    async with AsyncClient(settings=world.settings()) as c:
        ids = [f"batch-{i}" for i in range(50)]
        first = await c.enqueue_many("echo", [{"i": i} for i in range(50)], run_ids=ids)
        again = await c.enqueue_many("echo", [{"i": i} for i in range(50)], run_ids=ids)
        assert [r.id for r in first] == [r.id for r in again] == ids
        with pytest.raises(RunConflict):  # the same id with another input is refused
            await c.enqueue_many("echo", [{"i": "other"}], run_ids=["batch-0"])
        with pytest.raises(InvalidInput, match="2 inputs but 1 run ids"):
            await c.enqueue_many("echo", [{}, {}], run_ids=["x"])
    assert world.sql("SELECT count(*) FROM runs") == [(50,)]
