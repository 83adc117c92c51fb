"""Fair share across tenants within a queue, with real workers on real Postgres and Redis: a
queue's streams hold at most a window of each tenant's runs (the rest wait in Postgres, held), so
one tenant's backlog does not stand in front of another's. Counted in the world: stream entries,
the order runs started in (``executions``), held rows."""

from __future__ import annotations

import asyncio
import signal
import time

import pytest
import structlog

from outlast import Client
from outlast.producer.client import AsyncClient
from outlast.queue.streams import LEVELS
from outlast.worker.sweeper import Sweeper
from tests.conftest import World, wait_for

pytestmark = pytest.mark.both_redis  # the queue layer: on Redis 6.2 (embedded) and 7 (PATH)

WINDOW = "8"


def starts(world: World) -> list[str]:
    """Each run's tenant, in the order the runs started."""
    rows = world.sql(
        "SELECT r.tenant FROM executions e JOIN runs r ON r.id = e.run_id WHERE e.what = 'echo' ORDER BY e.id"
    )
    return [t for (t,) in rows]


def entries(world: World) -> int:
    r, stream = world.redis(), f"{world.prefix}:{{default}}:runs"
    return sum(int(r.xlen(stream + ("" if lv == "normal" else f":{lv}"))) for lv in LEVELS)


def held(world: World) -> int:
    n: int = world.sql("SELECT count(*) FROM runs WHERE state = 'queued' AND published_at IS NULL")[0][0]
    return n


def test_one_tenants_backlog_does_not_delay_anothers(world: World) -> None:
    with Client(settings=world.settings(tenant_window=int(WINDOW))) as c:
        c.enqueue_many("echo", [{"i": i} for i in range(300)], tenant="big")
        c.enqueue_many("echo", [{"i": i} for i in range(40)], tenant="small")
        c.enqueue_many("echo", [{"i": i} for i in range(5)])  # no tenant: never held
        # In the stream: a window of each tenant, and the run without one; the rest wait in Postgres.
        assert entries(world) == 8 + 8 + 5
        assert held(world) == 292 + 32
        waiting = world.sql("SELECT id FROM runs WHERE tenant = 'small' AND published_at IS NULL LIMIT 1")
        shown = world.cli("status", waiting[0][0])
        assert "its turn: tenant small" in shown.stdout, shown.stdout
        assert "held 324, queued 345" in world.cli("queues").stdout
        for _ in range(2):
            world.worker("tests.apps.basic:app", "-c", "4", OUTLAST_TENANT_WINDOW=WINDOW)
        wait_for(lambda: len(starts(world)) == 345, timeout=180, what="every run to start")
    order = starts(world)
    smalls = [i for i, t in enumerate(order) if t == "small"]
    # Without fair share the small tenant would start after the big one's 300 runs. Here it
    # starts among the first window or two, then shares the queue about one for one.
    assert smalls[0] < 24, order[:40]
    assert smalls[-1] < 130, smalls
    assert world.sql("SELECT count(*) FROM runs WHERE state = 'succeeded'") == [(345,)]
    assert held(world) == 0


def test_a_tenants_held_runs_go_highest_priority_first_one_per_claim(world: World) -> None:
    with Client(settings=world.settings(tenant_window=2)) as c:
        first = [c.enqueue("echo", {"i": i}, tenant="t") for i in range(4)]  # one after the other
        urgent = c.enqueue("echo", {"urgent": True}, tenant="t", priority="high")
        assert [r.held_back for r in first] == [False, False, True, True]
        assert c.status(urgent.id).held_back

    async def claim() -> None:
        ac = AsyncClient(settings=world.settings(tenant_window=2))
        await ac.open()
        try:
            got = await ac.store.leases.claim(first[0].id, "me", 30, {"echo": "v1"})
            assert got is not None and got.turn == (urgent.id, "default", "high")  # over older runs
            # Taken again after its lease ended: no turn, the window is full (first[1], urgent).
            world.sql("UPDATE runs SET lease_expires_at = now() - interval '1 s' WHERE id = %s", first[0].id)
            again = await ac.store.leases.claim(first[0].id, "me", 30, {"echo": "v1"})
            assert again is not None and again.turn is None
            got = await ac.store.leases.claim(first[1].id, "me", 30, {"echo": "v1"})
            assert got is not None and got.turn == (first[2].id, "default", "normal")
        finally:
            await ac.close()

    asyncio.run(claim())
    assert held(world) == 1  # first[3], until the next of the tenant's runs is claimed


async def test_the_sweeper_tops_a_window_up_after_cancellations(world: World) -> None:
    c = AsyncClient(settings=world.settings(tenant_window=3))
    await c.open()
    try:
        runs = [await c.enqueue("echo", {"i": i}, tenant="t") for i in range(7)]
        assert [r.held_back for r in runs] == [False] * 3 + [True] * 4
        for r in runs[:2]:
            await c.cancel(r.id)  # the window now holds one run; no claim will make the turns
        sweeper = Sweeper(c.store, c.queue, world.settings(tenant_window=3), ["default"])
        await sweeper.turns(structlog.get_logger())
        published = [f["run"] for _, f in world.redis().xrange(c.queue.stream("default", "normal"))]
        assert published == [r.id for r in runs[:5]]  # 3 at enqueue, 2 in turn, oldest first
        assert held(world) == 2
        # A window of 0 turns fair share off: every held run is published.
        off = Sweeper(c.store, c.queue, world.settings(), ["default"])
        c.store.tenant_window = 0
        await off.turns(structlog.get_logger())
        assert held(world) == 0 and entries(world) == 7
    finally:
        await c.close()


def test_held_runs_survive_killed_workers_under_short_leases(world: World) -> None:
    """Three tenants' backlogs, two workers at -c 16 with 1 s leases, one SIGKILLed mid-way: a turn
    made by a claim whose publication died with its worker is made again by the sweeper."""
    with Client(settings=world.settings(tenant_window=4)) as c:
        for tenant, n in (("a", 300), ("b", 150), ("c", 50)):
            c.enqueue_many("squares", [{"n": 2}] * n, tenant=tenant)
        env = {"OUTLAST_TENANT_WINDOW": "4", "OUTLAST_LEASE_TTL": "1", "OUTLAST_REPUBLISH_AFTER": "2"}
        doomed = world.worker("tests.apps.basic:app", "-c", "16", **env)
        world.worker("tests.apps.basic:app", "-c", "16", **env)
        wait_for(
            lambda: world.sql("SELECT count(*) FROM runs WHERE state = 'succeeded'")[0][0] > 100,
            timeout=120,
            what="a hundred runs to finish",
        )
        doomed.send_signal(signal.SIGKILL)
        world.worker("tests.apps.basic:app", "-c", "16", **env)
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            states = dict(world.sql("SELECT state, count(*) FROM runs GROUP BY state"))
            if states == {"succeeded": 500}:
                break
            time.sleep(0.5)
        assert states == {"succeeded": 500}, states
    assert held(world) == 0
