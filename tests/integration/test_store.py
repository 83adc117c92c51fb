"""The store's guarantees, checked in the database itself."""

from __future__ import annotations

from collections.abc import Awaitable

import psycopg
import pytest

from outlast._journal import make_entry
from outlast._model import RunRecord
from outlast.errors import SchemaError, ServiceUnavailable
from outlast.store import SCHEMA_VERSION, Store
from outlast.store.store import Lease
from tests.conftest import World


def add_run(store: Store, run_id: str) -> Awaitable[tuple[RunRecord, bool]]:
    """A queued run of a workflow nobody serves: the store's guarantees need no more."""
    return store.runs.insert_run(
        id=run_id, workflow="w", queue="default", input={}, input_hash="h", program=None, deadline_in=None
    )


async def opened(world: World) -> Store:
    s = Store(world.database_url, world.schema)
    await s.open()
    return s


async def test_final_state_never_changes_even_by_hand(world: World) -> None:
    store = await opened(world)
    await add_run(store, "r")
    got = await store.leases.claim("r", "me", 30, {"w": "v1"})
    assert got is not None
    claimed, _now, _turn, _paused = got
    assert await store.leases.finish("r", claimed.fencing_token, "succeeded", 0, result={"ok": 1})
    with pytest.raises(psycopg.errors.CheckViolation, match="final"):
        world.sql("UPDATE runs SET state = 'running' WHERE id = 'r'")
    assert not await store.leases.finish("r", claimed.fencing_token, "failed", 0)
    assert world.sql("SELECT state, result FROM runs WHERE id = 'r'") == [("succeeded", {"ok": 1})]
    await store.close()


async def test_a_finished_run_is_immutable_whole_row(world: World) -> None:
    store = await opened(world)
    await add_run(store, "r")
    got = await store.leases.claim("r", "me", 30, {"w": "v1"})
    assert got is not None
    assert await store.leases.finish("r", got[0].fencing_token, "succeeded", 0, result={"ok": 1})
    before = world.sql("SELECT * FROM runs WHERE id = 'r'")
    changes = ("input = '{\"amount\": 1000}'", "workflow = 'other'", "owner = 'me'", "updated_at = now()")
    for change in changes:
        with pytest.raises(psycopg.errors.CheckViolation, match="a finished run never changes"):
            world.sql(f"UPDATE runs SET {change} WHERE id = 'r'")
    world.sql("UPDATE runs SET input = input WHERE id = 'r'")  # changes nothing: let through
    assert world.sql("SELECT * FROM runs WHERE id = 'r'") == before
    await store.close()


async def test_writes_with_a_stale_token_are_refused(world: World) -> None:
    store = await opened(world)
    await add_run(store, "r")
    got = await store.leases.claim("r", "a", 30, {"w": "v1"})
    assert got is not None
    first = got[0]
    world.sql("UPDATE runs SET lease_expires_at = now() - interval '1 second' WHERE id = 'r'")
    got = await store.leases.claim("r", "b", 30, {"w": "v1"})
    assert got is not None
    second = got[0]
    assert second.fencing_token == first.fencing_token + 1
    entry = make_entry("", 1, "value", "op-1", {"name": "now", "value": 1})
    assert await store.journal.append("r", first.fencing_token, entry) is None  # refused
    assert await store.journal.append("r", second.fencing_token, entry) is False  # written, no cancel asked
    assert await store.leases.renew({"r": first.fencing_token}, 30) == {"r": Lease(False, True, False)}
    assert await store.leases.renew({"r": second.fencing_token}, 30) == {"r": Lease(True, False, False)}
    assert await store.leases.claim("r", "c", 30, {"w": "v1"}) is None  # the live lease holds
    await store.close()


async def test_a_newer_schema_is_refused(world: World) -> None:
    # Contracted by a migration this code does not know (tests/integration/test_upgrade_schema.py).
    newer = str(SCHEMA_VERSION + 1)
    world.sql("UPDATE outlast_meta SET value = %s WHERE key IN ('schema_version', 'oldest_code')", newer)
    store = Store(world.database_url, world.schema)
    with pytest.raises(SchemaError, match="newer than this outlast knows"):
        await store.open()
    await store.close()


async def test_an_older_schema_asks_for_migrate(world: World) -> None:
    world.sql("UPDATE outlast_meta SET value = '1' WHERE key = 'schema_version'")
    store = Store(world.database_url, world.schema)
    with pytest.raises(SchemaError, match=r"older than this outlast needs .* run: outlast migrate"):
        await store.open()
    await store.close()


async def test_migrate_is_idempotent_and_missing_schema_is_named(world: World) -> None:
    store = await opened(world)
    assert await store.migrate() == SCHEMA_VERSION
    assert await store.migrate() == SCHEMA_VERSION
    await store.close()
    missing = Store(world.database_url, world.schema + "_none")
    with pytest.raises(SchemaError, match="outlast migrate"):
        await missing.open()
    await missing.close()


async def test_shared_commits_batch_concurrent_writes(world: World) -> None:
    import asyncio

    store = await opened(world)
    await asyncio.gather(*(add_run(store, f"r{i}") for i in range(50)))
    assert world.sql("SELECT count(*) FROM runs") == [(50,)]
    assert store.writer.commits < store.writer.writes  # commits were shared
    await store.close()


async def test_a_failing_write_does_not_spoil_its_batch(world: World) -> None:
    import asyncio

    store = await opened(world)
    bad = store.writer.write("UPDATE runs SET state = 'nope' WHERE true RETURNING id", {})
    await add_run(store, "seed")
    good = [add_run(store, f"r{i}") for i in range(5)]
    results = await asyncio.gather(bad, *good, return_exceptions=True)
    assert isinstance(results[0], ServiceUnavailable)  # tried a few times, then given up
    assert isinstance(results[0].__cause__, psycopg.errors.CheckViolation)
    assert all(not isinstance(r, BaseException) for r in results[1:])
    assert world.sql("SELECT count(*) FROM runs") == [(6,)]
    await store.close()


async def test_cancelling_a_run_no_worker_can_resume_ends_it_at_once(world: World) -> None:
    from outlast import AsyncClient

    async with AsyncClient(settings=world.settings()) as c:
        run = await c.enqueue("w", {})
        world.sql(
            "UPDATE runs SET state = 'waiting', reason = 'program_changed', journal_len = 2 WHERE id = %s",
            run.id,
        )
        done = await c.cancel(run.id)
    assert done.state == "cancelled"
    assert done.reason == "cancelled while it could not be resumed (program_changed): no compensation ran"
    assert done.finished_at is not None


async def test_one_sweep_pass_pages_through_due_runs_once(world: World) -> None:
    """A pass after Redis lost its data republishes everything due (after=0), page by page: a
    page must never bring back what an earlier page of the same pass stamped."""
    store = await opened(world)
    for i in range(7):
        await add_run(store, f"r{i}")
    cutoff = await store.sweeps.db_now()
    seen: list[str] = []
    while page := await store.sweeps.due(0.0, 3, cutoff):
        seen += [rid for rid, *_ in page]
        assert len(seen) <= 7, f"pages repeat runs: {seen}"
    assert sorted(seen) == [f"r{i}" for i in range(7)]
    await store.close()


async def test_a_batch_too_big_for_the_stall_bound_is_committed_in_halves(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio

    from outlast.store import lane as writer

    monkeypatch.setattr(writer, "STALL", 0.5)
    store = await opened(world)
    await add_run(store, "seed")  # the writer's connection, made before the clock matters
    slow = "SELECT pg_sleep(0.2), %(i)s::int AS i"  # four of these take 0.8 s together
    rows = await asyncio.gather(*(store.writer.write(slow, {"i": i}) for i in range(4)))
    assert [r[0]["i"] for r in rows] == [0, 1, 2, 3]
    await store.close()


@pytest.mark.parametrize("reason", ["timer", "child", "concurrency_slot", "rate_limit"])
async def test_a_waiting_run_come_due_is_refused_by_a_worker_not_serving_its_program(
    world: World, reason: str
) -> None:
    """A run waiting for any reason (a timer, a child, a slot, a rate window) once it is due, met
    by a worker serving another program (no live worker serves its own): parked program_changed,
    with an event saying why. Not before it is due, nor by a worker that serves its program."""
    store = await opened(world)
    await store.runs.insert_run(
        id="r", workflow="w", queue="default", input={}, input_hash="h", program="v1", deadline_in=None
    )
    world.sql(
        "UPDATE runs SET state = 'waiting', reason = %s, wake_at = now() + interval '1 hour' WHERE id = 'r'",
        reason,
    )
    assert not await store.leases.refuse_program("r", "v2", "not yet due")
    world.sql("UPDATE runs SET wake_at = now() - interval '1 second' WHERE id = 'r'")
    assert not await store.leases.refuse_program("r", "v1", "serves it")
    assert world.sql("SELECT state, reason FROM runs WHERE id = 'r'") == [("waiting", reason)]
    # A live worker serves v1 (it came due after the look that found none): not parked.
    world.sql(
        "INSERT INTO workers (name, host, pid, queues, programs, concurrency, lease_ttl, runs_held) "
        "VALUES ('old', 'h', 1, ARRAY['default'], '{\"w\": \"v1\"}', 1, 30, 0)"
    )
    assert not await store.leases.refuse_program("r", "v2", "served by a live worker")
    world.sql("UPDATE workers SET last_beat = now() - interval '91 seconds'")  # silent for 3 TTLs
    assert await store.leases.refuse_program("r", "v2", "the program changed")
    assert world.sql("SELECT state, reason, owner, lease_expires_at FROM runs WHERE id = 'r'") == [
        ("waiting", "program_changed", None, None)
    ]
    assert world.sql(
        "SELECT kind, detail->>'reason', detail->>'message' FROM events"
        " WHERE run_id = 'r' AND kind = 'waiting'"
    ) == [("waiting", "program_changed", "the program changed")]
    await store.close()


async def test_redis_used_tells_a_fresh_redis_from_one_that_lost_its_data(world: World) -> None:
    store = await opened(world)
    assert not await store.fleet.redis_used(["p:alive"]), "a fresh schema on a fresh Redis lost nothing"
    assert await store.fleet.redis_used(["p:alive"]), "the same marker gone again: Redis lost its data"
    assert not await store.fleet.redis_used(["p:{b}:alive"]), "a new queue's marker (a cluster): fresh"
    assert await store.fleet.redis_used(["p:{b}:alive", "p:{c}:alive"]), "one of them was used"
    # A schema from before markers were recorded (or whose runs were published before any sweep).
    world.sql("DELETE FROM outlast_meta WHERE key LIKE 'redis_marker:%%'")
    await add_run(store, "r1")
    assert await store.fleet.redis_used(["p:alive"])
    await store.close()
