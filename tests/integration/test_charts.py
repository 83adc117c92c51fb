"""The dashboard's charts, from the rollup the workers' sweepers keep once a minute (0021): a real
worker runs runs (some fail, some call tools), the rollup counts them, and its numbers are those of
the rows in the world; a viewer sees them drawn; the rollup is safe to do twice and catches up the
minutes no worker rolled up."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from starlette.testclient import TestClient

from outlast import Client
from outlast._latency import BOUNDS, Tally
from outlast.dashboard import create_app
from outlast.identity import add_user
from outlast.producer import AsyncClient
from outlast.settings import Settings
from outlast.store.rollup import RolledUp
from outlast.worker.rollup import Rollup
from tests.conftest import World, wait_for

APP = "tests.apps.basic:app"


class Log:
    """A logger that keeps what it was told."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, dict[str, Any]]] = []

    def info(self, event: str, **kw: Any) -> None:
        self.lines.append((event, kw))

    warning = info


async def stepped(s: Settings, log: Any = None) -> RolledUp:
    """One rollup step taken here, the current minute counted so far (its turn waited for: a
    worker may have just taken one). Its own tally: nothing of this process's is flushed."""
    async with AsyncClient(settings=s) as c:
        await c.open()
        rollup = Rollup(c.store.rollups, c.queue, every=1.0, tally=Tally())
        until = time.monotonic() + 20
        while (done := await rollup.step(log or Log(), open_minute=True)) is None:
            assert time.monotonic() < until, "no turn at the rollup within 20 s"
            await asyncio.sleep(0.2)
        return done


def step(s: Settings, log: Any = None) -> RolledUp:
    return asyncio.run(stepped(s, log))


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def per_minute(world: World, column: str, where: str = "true") -> dict[datetime, int]:
    rows = world.sql(
        f"SELECT date_trunc('minute', {column}), count(*) FROM runs"
        f" WHERE {column} IS NOT NULL AND {where} GROUP BY 1"
    )
    return {m: n for m, n in rows}


def rolled(world: World, column: str) -> dict[datetime, int]:
    return {m: n for m, n in world.sql(f"SELECT minute, {column} FROM rollup_runs WHERE {column} > 0")}


def operations(world: World) -> dict[str, int]:
    """Operations per tool, from the journal: an intention, or a read's result naming its tool."""
    rows = world.sql(
        "SELECT body::jsonb->>'tool', count(DISTINCT (run_id, op_id)) FROM journal "
        "WHERE kind IN ('intention', 'result') AND body::jsonb ? 'tool' GROUP BY 1"
    )
    return {tool: n for tool, n in rows}


def latencies(world: World) -> dict[str, int]:
    rows = world.sql("SELECT tool, sum(c) FROM rollup_latency, unnest(counts) AS c GROUP BY tool")
    return {tool: int(n) for tool, n in rows}


@pytest.fixture
def viewer(world: World) -> Iterator[tuple[Settings, str]]:
    users = world.tmp / "users.toml"
    bob = add_user(users, "bob", ["viewers"])  # no role: may only look
    yield world.settings(users=str(users)), bob


def test_the_charts_count_what_the_world_holds(world: World, viewer: tuple[Settings, str]) -> None:
    s, bob = viewer
    # Its sweeper's rollup steps every second; it re-publishes no run of the idle queue below.
    world.worker(APP, OUTLAST_ROLLUP_EVERY="1", OUTLAST_REPUBLISH_AFTER="3600")
    with Client(settings=s) as c:
        runs = [c.enqueue("squares", {"n": 3}) for _ in range(3)]
        runs += [c.enqueue("boom") for _ in range(2)] + [c.enqueue("echo", {"i": i}) for i in range(2)]
        for r in runs:
            c.wait(r.id, timeout=30)
        for i in range(4):  # a queue no worker serves: its entries wait
            c.enqueue("echo", {"i": i}, queue="idle")
    time.sleep(0.5)  # the idle queue's oldest entry has waited

    # The worker adds its operations' latencies (kept in memory) every step: all of them, once.
    assert operations(world) == {"square": 9, "fragile": 3}
    wait_for(lambda: latencies(world) == operations(world), 20, what="the worker's latencies rolled up")

    done = step(s)
    assert done.queues >= 2
    started, finished = per_minute(world, "started_at"), per_minute(world, "finished_at")
    failed = per_minute(world, "finished_at", "state = 'failed'")
    assert (sum(started.values()), sum(finished.values()), sum(failed.values())) == (7, 7, 2)
    assert rolled(world, "started") == started
    assert rolled(world, "finished") == finished
    assert rolled(world, "failed") == failed
    [(depth, age)] = world.sql(
        "SELECT depth, oldest_age FROM rollup_queues WHERE queue = 'idle' ORDER BY minute DESC LIMIT 1"
    )
    assert depth == 4 and age >= 0.4
    with world.redis() as r:
        assert sum(r.xlen(f"{world.prefix}:{{idle}}:runs{level}") for level in ("", ":high", ":low")) == 4
    [(default_depth,)] = world.sql(
        "SELECT depth FROM rollup_queues WHERE queue = 'default' ORDER BY minute DESC LIMIT 1"
    )
    assert default_depth == 0

    # A viewer sees them drawn, and as JSON.
    with TestClient(create_app(s), base_url="http://127.0.0.1") as http:
        page = http.get("/charts", headers=bearer(bob) | {"accept": "text/html"})
        assert page.status_code == 200, page.text
        html = page.text
        assert 'href="/charts"' in html  # in the nav of every page
        assert html.count("<svg") == 4
        assert "<polyline" in html or "<circle" in html
        assert "started: 7 in the window" in html
        assert "finished: 7 in the window" in html
        assert "failed: 2 in the window" in html
        assert "idle: 4 (last sample)" in html and "default: 0 (last sample)" in html
        rows = re.findall(r"<tr><td>(\w+)</td>\s*<td>[^<]*</td><td>[^<]*</td><td>(\d+)</td>", html)
        assert dict(rows) == {"fragile": "3", "square": "9"}
        assert http.get("/charts?window=day", headers=bearer(bob)).status_code == 200
        assert http.get("/charts?window=year", headers=bearer(bob)).status_code == 400

        api = http.get("/api/charts?window=hour", headers=bearer(bob)).json()
        assert sum(m["started"] for m in api["runs"]) == 7
        assert sum(m["failed"] for m in api["runs"]) == 2
        assert api["queues"]["idle"][-1]["depth"] == 4
        by_tool = {t["tool"]: t for t in api["latency"]}
        assert by_tool["square"]["hour"]["operations"] == 9 == by_tool["square"]["day"]["operations"]
        assert 0 < by_tool["fragile"]["hour"]["p50"] <= by_tool["fragile"]["hour"]["p95"] <= BOUNDS[-1]
        assert http.get("/api/charts").status_code == 401


def test_the_rollup_is_safe_twice_and_catches_up(world: World) -> None:
    s = world.settings()
    # Runs that ended over the last half hour (as a worker leaves them), one a minute; every third failed.
    [(now,)] = world.sql("SELECT now()")
    for k in range(1, 31):
        end = now - timedelta(minutes=k)
        world.sql(
            "INSERT INTO runs (id, workflow, input, input_hash, state, created_at, started_at, finished_at)"
            " VALUES (%s, 'echo', '{}', '', %s, %s, %s, %s)",
            f"r{k}",
            "failed" if k % 3 == 0 else "succeeded",
            end - timedelta(seconds=40),
            end - timedelta(seconds=30),
            end,
        )
    first = step(s)  # nothing rolled up yet: the last day's minutes, at once
    assert first.minutes == 24 * 60 + 1
    assert rolled(world, "started") == per_minute(world, "started_at")
    assert rolled(world, "finished") == per_minute(world, "finished_at")
    assert rolled(world, "failed") == per_minute(world, "finished_at", "state = 'failed'")
    assert sum(rolled(world, "failed").values()) == 10
    whole = world.sql("SELECT * FROM rollup_runs ORDER BY minute")
    last = whole[-1][0]  # a minute may close meanwhile: the rows up to this one are compared

    def rows() -> list[tuple[Any, ...]]:
        return world.sql("SELECT * FROM rollup_runs WHERE minute <= %s ORDER BY minute", last)

    step(s)  # again: the same rows, nothing counted twice
    assert rows() == whole

    # No worker rolled up for the last 20 minutes: the next step counts every one of them.
    world.sql("DELETE FROM rollup_runs WHERE minute > now() - interval '20 minutes'")
    log = Log()
    again = step(s, log)
    assert rows() == whole
    assert again.minutes >= 20
    [said] = [kw for event, kw in log.lines if event == "charts.caught_up"]
    assert said["minutes"] == again.minutes

    # A worker's latencies sent twice under one flush id (a lost acknowledgement) count once.
    async def flush() -> None:
        async with AsyncClient(settings=s) as c:
            await c.open()
            minute = datetime.now(UTC).replace(second=0, microsecond=0)
            counts = {"pay": [1] * (len(BOUNDS) + 1)}
            await c.store.rollups.flush_latencies("f1", minute, counts)
            await c.store.rollups.flush_latencies("f1", minute, counts)
            await c.store.rollups.flush_latencies("f2", minute, counts)

    asyncio.run(flush())
    assert latencies(world) == {"pay": 2 * (len(BOUNDS) + 1)}
