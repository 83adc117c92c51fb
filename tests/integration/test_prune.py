"""Retention: `outlast prune` and the sweeper's OUTLAST_RETENTION delete finished runs with what
is theirs, in batches, and never a run that is not final or a budget a kept run shares."""

from __future__ import annotations

import time

from outlast import Client
from outlast.store import Pruned, Store
from tests.conftest import World, wait_for

LOCK = "SELECT pg_advisory_lock(hashtext(%s || ':outlast-prune'))"


def add(
    world: World,
    run_id: str,
    state: str = "succeeded",
    days_ago: float | None = 2,
    parent: str | None = None,
    budget: str | None = None,
    started_by: str | None = None,
) -> None:
    """A run as a worker would have left it, finished ``days_ago`` (None: not finished), with two
    journal entries, an event, an approval and a reservation (and a budget of its own if
    ``budget`` is its id)."""
    world.sql(
        "INSERT INTO runs (id, workflow, input, input_hash, state, finished_at, parent_id, budget_id,"
        " started_by)"
        " VALUES (%s, 'w', '{}', 'h', %s, now() - make_interval(secs => %s * 86400), %s, %s, %s)",
        run_id,
        state,
        days_ago,
        parent,
        budget,
        started_by,
    )
    world.sql(
        "INSERT INTO journal (run_id, seq, kind, body, hash)"
        " SELECT %s, seq, 'k', 'b', 'h' || seq FROM generate_series(1, 2) AS seq",
        run_id,
    )
    world.sql("INSERT INTO events (run_id, kind) VALUES (%s, %s)", run_id, state)
    world.sql(
        "INSERT INTO approvals (id, run_id, op_id, action, args, args_hash, approvers)"
        " VALUES (%s, %s, 'op-1', 'refund', '{}', 'h', '{ops}')",
        f"{run_id}:op-1",
        run_id,
    )
    if budget is not None:
        if budget == run_id:
            world.sql("INSERT INTO budgets (budget_id, name, limit_value) VALUES (%s, 'usd', 5)", run_id)
        world.sql(
            "INSERT INTO reservations (budget_id, run_id, op_id, name, amount)"
            " VALUES (%s, %s, 'op-1', 'usd', 1)",
            budget,
            run_id,
        )


def ids(world: World) -> set[str]:
    return {r[0] for r in world.sql("SELECT id FROM runs")}


def orphans(world: World) -> int:
    """Rows left behind by a deleted run (journal, events, approvals, reservations, budgets)."""
    return sum(
        world.sql(
            f"SELECT count(*) FROM {table} t WHERE NOT EXISTS (SELECT 1 FROM runs WHERE runs.{key} = t.{col})"
        )[0][0]
        for table, col, key in (
            ("journal", "run_id", "id"),
            ("events", "run_id", "id"),
            ("approvals", "run_id", "id"),
            ("reservations", "run_id", "id"),
            ("budgets", "budget_id", "budget_id"),
        )
    )


async def test_prune_keeps_what_is_live_shared_or_continued_and_counts_first(world: World) -> None:
    for i in range(7):
        add(world, f"old-{i}", "failed" if i % 2 else "succeeded")
    add(world, "recent", days_ago=0.001)  # finished 90 s ago
    for state in ("queued", "running", "waiting", "awaiting_approval", "cancelling"):
        add(world, f"live-{state}", state, days_ago=None)
    # A finished run whose budget a live continuation shares: both stay, and the budget.
    add(world, "root", budget="root")
    add(world, "root-next", "running", days_ago=None, parent="root", budget="root")
    # A finished chain sharing one budget: all of it goes, the budget with the last one.
    add(world, "a", budget="a")
    add(world, "a-next", parent="a", budget="a")
    add(world, "a-last", "cancelled", parent="a-next", budget="a")
    # A chain whose newest run is recent: it and the runs it continues stay.
    add(world, "b", budget="b")
    add(world, "b-next", parent="b", budget="b")
    add(world, "b-last", days_ago=0.001, parent="b-next", budget="b")
    kept = {
        "recent",
        *(f"live-{s}" for s in ("queued", "running", "waiting", "awaiting_approval", "cancelling")),
        *("root", "root-next", "b", "b-next", "b-last"),
    }

    store = Store(world.database_url, world.schema)
    await store.open()
    before = await store.sweeps.cutoff(86400)
    assert await store.sweeps.prune_count(before, "failed") == Pruned(3, 6, 3, 3, 0, 0)
    counted = await store.sweeps.prune_count(before)
    assert counted == Pruned(runs=10, journal=20, events=10, approvals=10, reservations=3, budgets=1)
    assert ids(world) - kept == {f"old-{i}" for i in range(7)} | {"a", "a-next", "a-last"}  # nothing deleted

    assert await store.sweeps.prune(before, "failed", batch=2) == Pruned(3, 6, 3, 3, 0, 0)
    assert await store.sweeps.prune(before, batch=2) == Pruned(7, 14, 7, 7, 3, 1)  # the chain newest first
    assert ids(world) == kept
    assert orphans(world) == 0
    assert world.sql("SELECT budget_id FROM budgets ORDER BY 1") == [("b",), ("root",)]
    assert await store.sweeps.prune(before) == Pruned()
    await store.close()


async def test_one_exclusive_pruner_at_a_time(world: World) -> None:
    add(world, "old")
    store = Store(world.database_url, world.schema)
    await store.open()
    before = await store.sweeps.cutoff(60)
    other = Store(world.database_url, world.schema)
    await other.open()
    async with other._conn() as held:  # another worker's pass holds the schema's lock
        await held.execute(LOCK, (world.schema,))
        assert await store.sweeps.prune(before, exclusive=True) == Pruned()
        await held.execute("SELECT pg_advisory_unlock_all()")
    assert (await store.sweeps.prune(before, exclusive=True)).runs == 1
    await other.close()
    await store.close()


def test_prune_command_after_real_runs(world: World) -> None:
    world.worker()
    with Client(settings=world.settings()) as client:
        runs = [client.enqueue("echo", {"n": i}) for i in range(3)]
        for run in runs:
            assert client.wait(run.id, timeout=30).state == "succeeded"
        live = client.enqueue("slow", {"seconds": 30})
        wait_for(lambda: client.status(live.id).state == "running", 10, what="the slow run to start")
        time.sleep(1.1)
        events = world.sql("SELECT count(*) FROM events WHERE run_id <> %s", live.id)[0][0]
        journal = world.sql("SELECT count(*) FROM journal WHERE run_id <> %s", live.id)[0][0]

        dry = world.cli("prune", "--finished-before", "1s", "--dry-run")
        assert dry.returncode == 0, dry.stderr
        assert dry.stdout.startswith("would delete 3 run(s) finished before ")
        assert f"{journal} journal entries, {events} events" in dry.stdout
        assert "dry run: nothing deleted" in dry.stdout
        assert len(ids(world)) == 4

        done = world.cli("prune", "--finished-before", "1s")
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("deleted 3 run(s) ") and f"{journal} journal entries" in done.stdout
        assert ids(world) == {live.id}
        assert orphans(world) == 0
        assert client.status(live.id).state == "running"

        bad = world.cli("prune", "--finished-before", "30")
        assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "30d, 12h" in bad.stderr
        assert "Traceback" not in bad.stderr


def test_the_sweeper_applies_outlast_retention(world: World) -> None:
    for i in range(3):
        add(world, f"old-{i}", days_ago=2)
    add(world, "young", days_ago=0.5)
    add(world, "live", "running", days_ago=None)
    world.worker(OUTLAST_RETENTION="1d")
    world.worker(OUTLAST_RETENTION="1d")  # two workers: one prunes, the other skips its pass
    wait_for(lambda: ids(world) == {"young", "live"}, 20, what="the old runs to be pruned")
    assert orphans(world) == 0
    wait_for(lambda: world.logged("sweeper.pruned", runs=3), 5, what="the sweeper's report")
    assert len(world.logged("sweeper.pruned")) == 1


def test_a_bad_retention_is_refused_in_one_line(world: World) -> None:
    p = world.cli("runs", OUTLAST_RETENTION="10s")
    assert p.returncode == 2
    assert p.stderr.strip() == (
        "outlast: error: OUTLAST_RETENTION must be at least 1m (or unset: keep finished runs), got '10s'"
    )


async def test_a_finished_child_is_kept_while_its_parent_is_not_final(world: World) -> None:
    """A child finished long ago stays while the run that started it is live (it may still read
    the child's result); once that parent is final, the child is pruned like any run."""
    live = ("queued", "running", "waiting", "awaiting_approval", "cancelling")
    for state in live:
        add(world, f"parent-{state}", state, days_ago=None)
        add(world, f"parent-{state}:op-1", started_by=f"parent-{state}")
    add(world, "done")
    add(world, "done:op-1", "failed", started_by="done")
    add(world, "orphan:op-1", started_by="orphan")  # its parent pruned already: nothing holds it
    kept = {f"parent-{s}" for s in live} | {f"parent-{s}:op-1" for s in live}

    store = Store(world.database_url, world.schema)
    await store.open()
    before = await store.sweeps.cutoff(86400)
    assert await store.sweeps.prune_count(before) == Pruned(3, 6, 3, 3, 0, 0)
    assert await store.sweeps.prune_count(before, "succeeded") == Pruned(2, 4, 2, 2, 0, 0)
    assert await store.sweeps.prune(before, batch=2) == Pruned(3, 6, 3, 3, 0, 0)
    assert ids(world) == kept
    assert orphans(world) == 0
    await store.close()
