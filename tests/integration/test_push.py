"""Push instead of polling: ``wait`` and ``follow`` are woken by LISTEN/NOTIFY, cost the database
nothing between changes, and lose nothing when their listening connection is killed."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import psycopg
import pytest

from outlast._journal import make_entry
from outlast.errors import WaitTimeout
from outlast.producer import AsyncClient
from outlast.store import Store
from outlast.store.notify import channel
from tests.conftest import World, wait_for

IDLE_POLL = 60.0  # a fallback poll this long never wakes a test: only a notification can


async def started(world: World, run_id: str) -> tuple[AsyncClient, Store, int]:
    """A client, and a worker's store holding the run ``run_id`` (claimed): its token."""
    client = AsyncClient(settings=world.settings())
    await client.open()
    await client.store.runs.insert_run(
        id=run_id, workflow="w", queue="default", input={}, input_hash="h", program=None, deadline_in=None
    )
    worker = Store(world.database_url, world.schema)
    await worker.open()
    got = await worker.leases.claim(run_id, "me", 30, {"w": "v1"})
    assert got is not None
    return client, worker, got[0].fencing_token


def listener(world: World, run_id: str) -> tuple[int, Any] | None:
    """The backend listening for the run, registered as its watcher: its pid and when it last
    did anything."""
    rows = world.sql(
        "SELECT a.pid, a.state_change FROM pg_stat_activity a JOIN watchers w ON w.pid = a.pid"
        " WHERE w.run_id = %s AND a.application_name = 'outlast-listen' AND a.state = 'idle'",
        run_id,
    )
    return rows[0] if rows else None


async def test_wait_costs_nothing_between_changes_and_is_woken_at_once(world: World) -> None:
    client, worker, token = await started(world, "r")
    waiting = asyncio.create_task(client.wait("r", poll=IDLE_POLL))
    await asyncio.sleep(0.3)
    before = listener(world, "r")
    assert before is not None, "no connection listens for the run"
    reads = client.store.reads
    # The run changes without an event (journal appends notify nothing) and time passes.
    await worker.journal.append("r", token, make_entry("", 1, "value", "op-1", {"name": "now", "value": 1}))
    await asyncio.sleep(1.5)
    assert client.store.reads == reads, "the waiting client read something between changes"
    assert listener(world, "r") == before, "the listening connection ran a statement meanwhile"
    assert not waiting.done()

    t = time.monotonic()
    assert await worker.leases.finish("r", token, "succeeded", 1, result={"ok": 1})
    done = await asyncio.wait_for(waiting, 5)
    woken_after = time.monotonic() - t
    assert done.state == "succeeded" and done.result == {"ok": 1}
    assert woken_after < 0.5, f"woken {woken_after:.2f}s after the commit"
    assert client.store.reads == reads + 1  # one look, and it found the run final
    await asyncio.sleep(0.2)
    assert listener(world, "r") is None, "the listening connection outlived the wait"
    assert world.sql("SELECT count(*) FROM watchers") == [(0,)]
    await worker.close()
    await client.close()


async def test_a_change_committing_while_the_client_registers_is_not_missed(world: World) -> None:
    """A writer's event statement ran before the client registered (no notification) and
    commits after: the registration waits for the writer's row lock, so the client's look
    sees the change."""
    client, worker, _token = await started(world, "r")
    writer = await psycopg.AsyncConnection.connect(
        world.database_url, options=f"-c search_path={world.schema}"
    )
    await writer.execute("UPDATE runs SET state = 'succeeded', finished_at = now() WHERE id = 'r'")
    await writer.execute("INSERT INTO events (run_id, kind) VALUES ('r', 'succeeded')")  # nobody watches yet
    waiting = asyncio.create_task(client.wait("r", poll=IDLE_POLL))
    await asyncio.sleep(0.5)  # the client read 'running', listens, and registers: it waits for the row
    assert not waiting.done()
    await writer.commit()
    assert (await asyncio.wait_for(waiting, 3)).state == "succeeded"
    await writer.close()
    await worker.close()
    await client.close()


async def test_wait_times_out_without_polling(world: World) -> None:
    client, worker, _token = await started(world, "r")
    reads = client.store.reads
    t = time.monotonic()
    with pytest.raises(WaitTimeout, match=r"still running after 0\.8s"):
        await client.wait("r", timeout=0.8, poll=IDLE_POLL)
    assert 0.8 <= time.monotonic() - t < 1.5
    assert client.store.reads == reads + 3  # before listening, after, and a last look at the timeout
    await worker.close()
    await client.close()


async def test_a_killed_listening_connection_loses_no_event(world: World) -> None:
    client, worker, token = await started(world, "r")
    seen: list[dict[str, Any]] = []

    async def follow() -> None:
        async for event in client.follow("r", poll=0.3):
            seen.append(event)

    following = asyncio.create_task(follow())
    await asyncio.to_thread(wait_for, lambda: listener(world, "r"), 5, 0.05, "a listener")
    await worker.runs.event("r", "one", {})
    await asyncio.to_thread(wait_for, lambda: len(seen) == 2, 5, 0.05, "the first event pushed")
    killed = listener(world, "r")
    assert killed is not None
    # Killed, and events written while it is gone and before it is listening again.
    world.sql("SELECT pg_terminate_backend(%s)", killed[0])
    for kind in ("two", "three"):
        await worker.runs.event("r", kind, {})
    again = await asyncio.to_thread(
        wait_for,
        lambda: (lst := listener(world, "r")) and lst[0] != killed[0] and lst,
        5,
        0.05,
        "a new listener",
    )
    assert again
    await worker.runs.event("r", "four", {})
    assert await worker.leases.finish("r", token, "succeeded", 0)
    await asyncio.wait_for(following, 5)
    kinds = [e["kind"] for e in seen]
    assert kinds == ["enqueued", "one", "two", "three", "four", "succeeded"]
    assert [e["id"] for e in seen] == sorted({e["id"] for e in seen})
    # The killed connection's registration is left behind; the sweeper's query removes it.
    assert world.sql("SELECT pid FROM watchers") == [(killed[0],)]
    assert await worker.fleet.forget_watchers() == 1
    assert world.sql("SELECT count(*) FROM watchers") == [(0,)]
    await worker.close()
    await client.close()


async def test_follow_sees_events_committed_out_of_id_order(world: World) -> None:
    """An event written while another transaction holds the run (its event numbered first, not
    yet committed) waits for it: ids follow commits, and follow, resuming after the last id it
    saw, skips none."""
    client, worker, token = await started(world, "r")
    seen: list[str] = []

    async def follow() -> None:
        async for event in client.follow("r", poll=IDLE_POLL):
            seen.append(event["kind"])

    following = asyncio.create_task(follow())
    await asyncio.to_thread(wait_for, lambda: seen == ["enqueued"], 5, 0.05, "the first event")
    holder = await psycopg.AsyncConnection.connect(
        world.database_url, options=f"-c search_path={world.schema}"
    )
    await holder.execute(
        "WITH r AS (UPDATE runs SET updated_at = now() WHERE id = 'r' RETURNING id)"
        " INSERT INTO events (run_id, kind) SELECT id, 'first' FROM r"
    )
    second = asyncio.create_task(worker.runs.event("r", "second", {}))
    await asyncio.sleep(0.5)
    assert not second.done(), "an event was written under another transaction's hold of the run"
    await holder.commit()
    await asyncio.wait_for(second, 5)
    assert await worker.leases.finish("r", token, "succeeded", 0)
    await asyncio.wait_for(following, 5)
    assert seen == ["enqueued", "first", "second", "succeeded"]
    await holder.close()
    await worker.close()
    await client.close()


async def test_only_watched_runs_notify(world: World) -> None:
    """The trigger notifies no run that nobody watches: in Postgres a notifying commit takes a
    database-wide lock and signals every listening backend, a cost the writer would otherwise
    pay at every commit with an event."""
    client, worker, _token = await started(world, "r")
    raw = await psycopg.AsyncConnection.connect(world.database_url, autocommit=True)
    await raw.execute(f'LISTEN "{channel(world.schema, "r")}"'.encode())

    async def notified() -> bool:
        await worker.runs.event("r", "news", {})
        got = [n async for n in raw.notifies(timeout=0.5)]
        return bool(got)

    assert not await notified()  # listening, but not registered as a watcher
    world.sql("INSERT INTO watchers (run_id, pid) VALUES ('r', pg_backend_pid())")
    assert await notified()
    await raw.close()
    await worker.close()
    await client.close()


async def test_wait_polls_while_it_cannot_listen(world: World, monkeypatch: Any) -> None:
    client, worker, token = await started(world, "r")

    async def refused() -> Any:
        raise client.store._unavailable(OSError("refused"))

    monkeypatch.setattr(client.store, "_listener", refused)
    waiting = asyncio.create_task(client.wait("r", poll=0.2))
    await asyncio.sleep(0.7)
    assert client.store.reads >= 4  # polling, every 0.2 s
    assert await worker.leases.finish("r", token, "succeeded", 0)
    assert (await asyncio.wait_for(waiting, 2)).state == "succeeded"
    await worker.close()
    await client.close()


def test_a_real_worker_wakes_wait_and_events_follow(world: World) -> None:
    world.worker()
    from outlast import Client

    with Client(settings=world.settings()) as client:
        run = client.enqueue("slow", {"seconds": 0.5})
        follow = world.cli("events", run.id, "--follow")  # returns once the run is final
        assert follow.returncode == 0, follow.stderr
        assert [line.split()[1] for line in follow.stdout.splitlines()] == ["enqueued", "succeeded"]
        t = time.monotonic()
        second = client.enqueue("slow", {"seconds": 0.3})
        assert client.wait(second.id, timeout=30).state == "succeeded"
        assert time.monotonic() - t < 5
        assert [e["kind"] for e in client.follow(run.id)] == ["enqueued", "succeeded"]
