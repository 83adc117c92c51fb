"""Concurrency caps and shared rate limits (issue 12, items 4 and 5; per-tenant caps, item 7),
with real servers: the slot statements in Postgres, the rate windows in Redis, and real worker
processes counted in the world (rows their workflows and tools write, stamped by the database
clock)."""

from __future__ import annotations

import asyncio
import operator
import signal
import time
from datetime import datetime, timedelta
from typing import Any

import pytest

from outlast import App, Client
from outlast._limits import Rate
from outlast.app import Workflow
from outlast.queue import Queue, RateWindows
from outlast.store import Store
from outlast.worker.flow import workflow_key
from tests.conftest import World, wait_for

pytestmark = pytest.mark.both_redis  # the queue layer: on Redis 6.2 (embedded) and 7 (PATH)

APP = "tests.apps.flowcaps:app"


@pytest.fixture
def observed(world: World) -> World:
    world.sql(
        "CREATE TABLE observed (id serial PRIMARY KEY, run_id text, what text, key text, pid int,"
        " at timestamptz)"
    )
    return world


def most_at_once(world: World, key: str) -> int:
    """The most bodies between their 'start' and 'end' rows at any instant (ends first on a tie)."""
    rows = world.sql(
        "SELECT what FROM observed WHERE key = %s AND what IN ('start', 'end') ORDER BY at, what = 'start'",
        key,
    )
    running = top = 0
    for (what,) in rows:
        running += 1 if what == "start" else -1
        top = max(top, running)
    return top


def side_by_side(world: World, one: str, other: str) -> bool:
    """Some body of key ``one`` and some body of key ``other`` were executing at the same instant."""
    spans: dict[tuple[str, str], dict[str, datetime]] = {}
    for run_id, what, key, at in world.sql(
        "SELECT run_id, what, key, at FROM observed WHERE key IN (%s, %s) AND what IN ('start', 'end')",
        one,
        other,
    ):
        spans.setdefault((key, run_id), {})[what] = at
    ones = [s for (key, _), s in spans.items() if key == one]
    others = [s for (key, _), s in spans.items() if key == other]
    return any(a["start"] < b["end"] and b["start"] < a["end"] for a in ones for b in others)


def most_in_window(times: list[datetime], window: float) -> int:
    """The most timestamps within any half-open window [t, t + window)."""
    times = sorted(times)
    return max((sum(1 for u in times if t <= u < t + timedelta(seconds=window)) for t in times), default=0)


def finish_all(c: Client, ids: list[str], timeout: float = 60) -> None:
    for rid in ids:
        assert c.wait(rid, timeout=timeout).state == "succeeded", c.status(rid)


# -- the slot statements ---------------------------------------------------------------------


async def claimed_run(store: Store, run_id: str) -> int:
    await store.runs.insert_run(
        id=run_id, workflow="w", queue="default", input={}, input_hash="h", program=None, deadline_in=None
    )
    got = await store.leases.claim(run_id, "me", 30, {"w": "v1"})
    assert got is not None
    return got[0].fencing_token


async def test_slots_cap_fence_expire_and_renew_with_the_lease(world: World) -> None:
    store = Store(world.database_url, world.schema)
    await store.open()
    try:
        tokens = {r: await claimed_run(store, r) for r in ("a", "b", "c")}
        assert await store.flow.acquire_slot("k", 2, "a", tokens["a"], 30) is not None
        assert await store.flow.acquire_slot("k", 2, "b", tokens["b"], 30) is not None
        assert await store.flow.acquire_slot("k", 2, "c", tokens["c"], 30) is None  # full
        # the same holder again: its own slot, not a second one
        assert await store.flow.acquire_slot("k", 2, "a", tokens["a"], 30) is not None
        assert world.sql("SELECT count(*) FROM slots WHERE key = 'k'") == [(2,)]
        # a stale token takes nothing, and releases nothing
        assert await store.flow.acquire_slot("other", 5, "c", tokens["c"] - 1, 30) is None
        assert await store.flow.release_slots("a", tokens["a"] - 1) == 0
        # a slot whose lease ended is free for another run
        world.sql("UPDATE slots SET expires_at = now() - interval '1 second' WHERE run_id = 'a'")
        assert await store.flow.acquire_slot("k", 2, "c", tokens["c"], 30) is not None
        assert world.sql("SELECT run_id FROM slots WHERE key = 'k' ORDER BY run_id") == [("b",), ("c",)]
        # the heartbeat's renewal carries the slots held under the renewed token, and only those
        world.sql("UPDATE slots SET expires_at = now() + interval '1 second'")
        leases = await store.leases.renew({"b": tokens["b"], "c": tokens["c"] - 1}, 60)
        assert leases["b"].renewed and leases["c"].lost
        left = dict(world.sql("SELECT run_id, expires_at > now() + interval '30 seconds' FROM slots"))
        assert left == {"b": True, "c": False}
        assert await store.flow.release_slots("b", tokens["b"]) == 1
    finally:
        await store.close()


async def test_a_release_wakes_the_first_run_parked_for_its_key(world: World) -> None:
    store = Store(world.database_url, world.schema)
    await store.open()
    try:
        tokens = {r: await claimed_run(store, r) for r in ("holder", "p1", "p2", "other")}
        assert await store.flow.acquire_slot("k", 1, "holder", tokens["holder"], 30) is not None
        later = await store.sweeps.db_now() + timedelta(minutes=5)
        for rid, key, minutes in (("p1", "k", 0), ("p2", "k", 1), ("other", "j", 0)):
            wake = later + timedelta(minutes=minutes)
            assert await store.flow.park(rid, tokens[rid], "concurrency_slot", "full", wake, key)
        # run again (a lost acknowledgement): the same answer; a stale token: refused
        assert await store.flow.park("p1", tokens["p1"], "concurrency_slot", "full", later, "k")
        assert not await store.flow.park("holder", tokens["holder"] - 1, "concurrency_slot", "x", later, "k")
        assert await store.flow.release_slots("holder", tokens["holder"]) == 1
        due = world.sql("SELECT id FROM runs WHERE state = 'waiting' AND wake_at <= now() ORDER BY id")
        assert due == [("p1",)]  # the first due of those parked for "k"; neither "p2" nor another key's
    finally:
        await store.close()


async def test_slot_racers_never_share_a_slot(world: World) -> None:
    """Many acquisitions at once on a cap of 3, from separate connections: never more than 3."""
    store = Store(world.database_url, world.schema, max_size=16)
    await store.open()
    try:
        tokens = {f"r{i}": await claimed_run(store, f"r{i}") for i in range(30)}
        got = await asyncio.gather(*(store.flow.acquire_slot("k", 3, r, t, 30) for r, t in tokens.items()))
        taken = [s for s in got if s is not None]
        assert 1 <= len(taken) <= 3 and len(set(taken)) == len(taken)
        assert world.sql("SELECT count(*) FROM slots") == [(len(taken),)]
    finally:
        await store.close()


# -- the rate windows ------------------------------------------------------------------------


async def test_rate_windows_admit_settle_and_back_off(world: World) -> None:
    q = Queue(world.redis_url, world.prefix)
    w = RateWindows(q)
    requests, tokens = Rate("requests", 3, 10.0), Rate("tokens", 250, 10.0)
    try:
        wants = [(requests, 1.0), (tokens, 100.0)]
        assert await w.take("t", wants, "m1") == 0
        assert await w.take("t", wants, "m2") == 0
        wait = await w.take("t", wants, "m3")  # 300 tokens would pass 250: none of it admitted
        assert 0 < wait <= 10.0
        assert await w.settle("t", "tokens", "m1", 100, 20)  # it used 20 of the 100 reserved
        assert await w.take("t", wants, "m3") == 0  # 20 + 100 + 100
        assert 0 < await w.take("t", wants, "m4") <= 10.0  # four requests would pass 3
        # a window moves on: one request a second, admitted again a second later
        one = [(Rate("requests", 1, 1.0), 1.0)]
        assert await w.take("u", one, "n1") == 0
        await asyncio.sleep(1.05)
        assert await w.take("u", one, "n2") == 0
        await w.back_off("u", 5.0)  # a 429: every worker holds the tool back
        assert 0 < await w.take("u", one, "n3") <= 5.0
    finally:
        await q.close()


def test_rate_declarations_are_checked_at_registration() -> None:
    app = App()
    with pytest.raises(ValueError, match="needs an estimate"):
        app.tool("a", rate={"tokens": "100/min"})(lambda: 1)
    with pytest.raises(ValueError, match="COUNT/UNIT"):
        app.tool("b", rate={"requests": "100 a minute"})(lambda: 1)
    with pytest.raises(ValueError, match="more than rate"):
        app.tool("c", rate={"tokens": "100/min"}, cost={"tokens": 500})(lambda: 1)
    with pytest.raises(TypeError, match="max_concurrent"):
        app.tool("d", max_concurrent=0)(lambda: 1)
    with pytest.raises(TypeError, match="concurrency_key needs max_concurrent"):
        app.workflow("e", concurrency_key=lambda i: i["x"])
    app.tool("f", rate={"requests": "10/5s", "tokens": "9000/min"}, cost={"tokens": 10})(lambda: 1)
    assert app.tools["f"].rates == (Rate("requests", 10, 5), Rate("tokens", 9000, 60))


def test_a_concurrency_key_is_read_once_at_registration() -> None:
    """``"tenant"``, a function of (input) or of (input, tenant): one function of (input, tenant)
    from registration on; any other signature is refused there, naming the workflow."""
    app = App()

    async def body(run: object) -> None:
        return None

    def register(name: str, key: Any) -> Workflow:
        app.workflow(name, max_concurrent=1, concurrency_key=key)(body)
        return app.workflows[name]

    by_tenant = register("t", "tenant")
    assert workflow_key(by_tenant, {"x": 1}, "acme") == "workflow:t:tenant:acme"
    assert workflow_key(by_tenant, {"x": 1}, None) == "workflow:t:no-tenant"  # shared by the tenant-less
    assert workflow_key(register("i", lambda i: i["x"]), {"x": 1}, "acme") == "workflow:i:1"
    both = register("it", lambda i, t: f"{t}-{i['x']}")
    assert workflow_key(both, {"x": 1}, "acme") == "workflow:it:acme-1"
    assert workflow_key(register("d", lambda i, t=None: t), {}, "acme") == "workflow:d:acme"
    assert workflow_key(register("g", operator.itemgetter("x")), {"x": 2}, "acme") == "workflow:g:2"
    for bad in (lambda: 1, lambda i, t, u: 1, lambda *, i: 1, lambda i, *, t: 1):
        with pytest.raises(TypeError, match=r"workflow 'w': concurrency_key must take \(input\) or"):
            register("w", bad)
    with pytest.raises(TypeError, match="workflow 'w': concurrency_key must be \"tenant\" or a function"):
        register("w", "customer")

    with pytest.raises(TypeError, match="workflow 'unnamed': concurrency_key must take"):

        @app.workflow(max_concurrent=1, concurrency_key=lambda: 1)
        async def unnamed(run: object) -> None: ...

    assert "w" not in app.workflows and "unnamed" not in app.workflows


# -- real worker processes -------------------------------------------------------------------


def test_per_key_workflow_cap_across_workers(observed: World) -> None:
    world = observed
    with Client(settings=world.settings()) as c:
        ids = [
            c.enqueue("per_customer", {"customer": cust, "seconds": 0.6}).id
            for _ in range(4)
            for cust in ("acme", "globex", "initech")
        ]
        for _ in range(3):
            world.worker(APP, OUTLAST_CONCURRENCY="8")
        finish_all(c, ids)
    for cust in ("acme", "globex", "initech"):
        assert most_at_once(world, cust) == 1, cust
    starts = world.sql("SELECT at FROM observed WHERE what = 'start' ORDER BY at")
    ends = world.sql("SELECT at FROM observed WHERE what = 'end' ORDER BY at")
    assert starts[2][0] < ends[0][0]  # the keys ran side by side: the cap is per key
    assert len({p for (p,) in world.sql("SELECT DISTINCT pid FROM observed")}) >= 2
    parked = world.sql(
        "SELECT count(*) FROM events WHERE kind = 'waiting' AND detail->>'reason' = 'concurrency_slot'"
    )[0][0]
    assert parked >= 1  # a run over the cap waited without a worker, then ran


def test_per_tenant_cap_across_workers(observed: World) -> None:
    """``concurrency_key="tenant"``, max_concurrent=1: tenants a and b each run one at a time, side
    by side; the runs without a tenant share one key of their own, also one at a time."""
    world = observed
    with Client(settings=world.settings()) as c:
        ids = [
            c.enqueue("per_tenant", {"seconds": 0.5}, tenant=tenant).id
            for _ in range(3)
            for tenant in ("a", "b", None)
        ]
        for _ in range(2):
            world.worker(APP, OUTLAST_CONCURRENCY="8")
        finish_all(c, ids)
    for key in ("a", "b", "none"):
        assert world.sql("SELECT count(*) FROM observed WHERE key = %s AND what = 'start'", key) == [(3,)]
        assert most_at_once(world, key) == 1, key
    assert side_by_side(world, "a", "b")  # the cap is per tenant, not per workflow
    assert side_by_side(world, "a", "none") or side_by_side(world, "b", "none")


def test_a_concurrency_key_of_input_and_tenant_across_workers(observed: World) -> None:
    """``concurrency_key=f(input, tenant)`` (tenant and region), max_concurrent=1: one run at a
    time per tenant and region; another region of the same tenant, and the same region of another
    tenant, run side by side."""
    world = observed
    with Client(settings=world.settings()) as c:
        ids = [
            c.enqueue("per_tenant_region", {"region": region, "seconds": 0.5}, tenant=tenant).id
            for _ in range(2)
            for tenant in ("a", "b")
            for region in ("eu", "us")
        ]
        for _ in range(2):
            world.worker(APP, OUTLAST_CONCURRENCY="8")
        finish_all(c, ids)
    for key in ("a/eu", "a/us", "b/eu", "b/us"):
        assert most_at_once(world, key) == 1, key
    assert side_by_side(world, "a/eu", "a/us")  # the input's part of the key counts
    assert side_by_side(world, "a/eu", "b/eu")  # so does the tenant's


def test_workflow_and_tool_caps_across_workers(observed: World) -> None:
    world = observed
    with Client(settings=world.settings()) as c:
        ids = [c.enqueue("capped", {"seconds": 0.4}).id for _ in range(8)]
        ids += [c.enqueue("fan_out", {"n": 4}).id for _ in range(4)]
        for _ in range(3):
            world.worker(APP, OUTLAST_CONCURRENCY="8")
        finish_all(c, ids)
        assert c.status(ids[-1]).result == [0, 1, 2, 3]
    assert most_at_once(world, "capped") == 2
    assert 2 <= most_at_once(world, "narrow") <= 3
    assert world.sql("SELECT count(*) FROM observed WHERE key = 'narrow' AND what = 'start'") == [(16,)]
    assert world.sql("SELECT count(*) FROM slots") == [(0,)]  # every slot given back


def test_rate_limit_shared_by_workers_in_any_window(observed: World) -> None:
    """6 requests / 3 s for ``ask_model``, whatever the number of workers: 24 requests from three
    processes take at least (24/6 - 1) windows, and no window of the requests' own timestamps
    holds more than 6. (The check's window is 0.5 s short of 3 s: a request's row is written a
    moment after its admission, a moment that varies with the load of the machine.)"""
    world = observed
    with Client(settings=world.settings()) as c:
        ids = [c.enqueue("chat", {"n": 3}).id for _ in range(8)]
        for _ in range(3):
            world.worker(APP, OUTLAST_CONCURRENCY="8")
        finish_all(c, ids)
        waited = [e for rid in ids for e in c.events(rid)]
    # shown as why a run waited: in its worker (throttled), or parked without one
    assert any(e["kind"] == "throttled" or e["detail"].get("reason") == "rate_limit" for e in waited)
    times = [at for (at,) in world.sql("SELECT at FROM observed WHERE what = 'request'")]
    assert len(times) == 24
    assert (max(times) - min(times)).total_seconds() >= 8.5
    assert most_in_window(times, 2.5) <= 6
    assert len({p for (p,) in world.sql("SELECT DISTINCT pid FROM observed")}) >= 2


def test_rate_limited_backs_off_without_counting_an_attempt(observed: World) -> None:
    """``busy_api`` (``Retry(attempts=1)``) raises ``RateLimited`` twice, then answers: the run
    succeeds, the one operation dispatched three times under its one idempotency key."""
    world = observed
    with Client(settings=world.settings()) as c:
        rid = c.enqueue("polite", {"n": 7}).id
        world.worker(APP)
        assert c.wait(rid, timeout=30).result == 7
    calls = world.sql("SELECT key, at FROM observed WHERE what = 'call' ORDER BY at")
    assert len(calls) == 3 and len({k for k, _ in calls}) == 1
    assert (calls[-1][1] - calls[0][1]).total_seconds() >= 0.55  # two back-offs of 0.3 s
    intentions = world.sql("SELECT count(*) FROM journal WHERE run_id = %s AND kind = 'intention'", rid)
    assert intentions == [(1,)]


def test_a_killed_workers_slot_is_renewed_then_frees_after_its_lease(observed: World) -> None:
    world = observed
    with Client(settings=world.settings()) as c:
        first = c.enqueue("hog", {"seconds": 3.0}).id
        a = world.worker(APP)
        wait_for(lambda: world.sql("SELECT count(*) FROM slots")[0][0] == 1, what="the slot taken")
        (held,) = world.sql("SELECT expires_at FROM slots")[0]
        time.sleep(1.5)
        (renewed,) = world.sql("SELECT expires_at FROM slots")[0]
        assert renewed > held  # renewed with the lease (TTL 2 s) while the run goes on
        a.send_signal(signal.SIGKILL)
        a.wait(10)
        killed_at = time.monotonic()
        wait_for(
            lambda: world.sql("SELECT expires_at < now() FROM slots")[0][0],
            timeout=5,
            what="the dead worker's slot to expire",
        )
        assert time.monotonic() - killed_at <= 3.5  # within about one lease TTL (2 s), with slack
        second = c.enqueue("hog", {"seconds": 0.2}).id
        world.worker(APP)
        for rid in (first, second):
            assert c.wait(rid, timeout=40).state == "succeeded"
    rows = world.sql("SELECT what, run_id FROM observed WHERE key = 'hog'")
    assert ("start", second) in rows


def test_a_long_wait_for_a_tool_slot_parks_the_run_and_status_says_why(observed: World) -> None:
    """``solo`` (max_concurrent=1) holds its slot 2.5 s: the other runs, calling it alone, are
    parked (``waiting``, ``concurrency_slot``) instead of holding the worker, shown by ``outlast
    status``, and go live again at the same crossing (one intention each, nothing journaled by
    the wait)."""
    world = observed
    with Client(settings=world.settings()) as c:
        ids = [c.enqueue("solo_call", {}).id for _ in range(3)]
        world.worker(APP, OUTLAST_CONCURRENCY="8")

        def parked() -> str | None:
            rows = world.sql("SELECT id FROM runs WHERE state = 'waiting' AND reason = 'concurrency_slot'")
            return rows[0][0] if rows else None

        rid = wait_for(parked, what="a run parked for the slot")
        # parked (waiting, concurrency_slot) or woken and waiting in the worker again: said either way
        shown = world.cli("status", rid)
        assert "waits for a slot of tool 'solo'" in shown.stdout or "waits for    a slot of tool 'solo'" in (
            shown.stdout
        ), shown
        finish_all(c, ids)
    assert most_at_once(world, "solo") == 1
    for rid in ids:
        n = world.sql("SELECT count(*) FROM journal WHERE run_id = %s AND kind = 'intention'", rid)
        assert n == [(1,)]


@pytest.mark.parametrize(
    ("workflow", "shown"),
    [
        ("two_scarce", "waiting (rate_limit)"),
        ("two_scarce_at_once", "waits for    the rate of tool 'scarce' (requests 1/60s) (in its worker)"),
    ],
)
def test_a_wait_for_rate_is_shown_and_bounded_by_the_runs_deadline(
    observed: World, workflow: str, shown: str
) -> None:
    """``scarce`` allows one request a minute: the second call waits — parked (alone) or in the
    worker (beside a parallel call), as ``outlast status`` says — until the run's deadline ends it
    ``timed_out``, never dispatched past the limit."""
    world = observed
    with Client(settings=world.settings()) as c:
        # The deadline leaves the wait long enough to be seen on a loaded machine: a worker process
        # and each `outlast status` start Python (seconds each under load), and the line goes once
        # the deadline ends the run.
        rid = c.enqueue(workflow, {}, deadline=20.0).id
        world.worker(APP)
        wait_for(lambda: shown in world.cli("status", rid).stdout, timeout=20, what=shown)
        assert c.wait(rid, timeout=45).state == "timed_out"
    assert world.sql("SELECT count(*) FROM observed WHERE what = 'scarce'") == [(1,)]


@pytest.mark.parametrize("workflow", ["two_scarce_paid", "two_scarce_paid_at_once"])
def test_a_rate_wait_ended_by_the_deadline_leaves_no_budget_reservation(
    observed: World, workflow: str
) -> None:
    """The budget is reserved once the tool's rate admits the call: the second call's wait for
    the rate (parked, or in the worker) ends with the run's deadline, and the budget keeps only
    the first call's spend, nothing reserved for a call never made."""
    world = observed
    with Client(settings=world.settings()) as c:
        rid = c.enqueue(workflow, {}, deadline=6.0, budget={"usd": 10}).id
        world.worker(APP)
        assert c.wait(rid, timeout=30).state == "timed_out"
    assert world.sql("SELECT count(*) FROM observed WHERE what = 'scarce_paid'") == [(1,)]
    assert world.sql("SELECT spent, reserved FROM budgets WHERE budget_id = %s", rid) == [(1, 0)]
    assert world.sql("SELECT count(*) FROM reservations WHERE run_id = %s", rid) == [(0,)]


@pytest.mark.parametrize(
    ("workflow", "result"),
    [
        ("rate_beside_child", [1, 2, "worked"]),
        ("rate_beside_sleep", [1, 2]),
        ("rate_after_child_task", [1, 2, "worked"]),
    ],
)
def test_a_long_rate_wait_beside_a_durable_wait_stays_in_the_worker(
    observed: World, workflow: str, result: list[Any]
) -> None:
    """``once_in_5s`` already spent its request: the second call waits past ``SLOT_WAIT`` for the
    rate while a crossing beside it (a wait for a slow child, a durable sleep) is under way. The
    call is not alone: it waits in the worker (``throttled``), never parks the run, so the wait
    beside it commits the run's own wait (had the call parked, that commit would be refused as a
    stale fencing token: a "lease lost" that never happened). The run finishes, each tool once."""
    world = observed
    with Client(settings=world.settings()) as c:
        rid = c.enqueue(workflow, {"seconds": 3.0}).id
        world.worker(APP)
        run = c.wait(rid, timeout=60)
        assert (run.state, run.result) == ("succeeded", result), run.reason
        verified = world.cli("verify", rid)
        assert verified.returncode == 0, verified.stdout + verified.stderr
    called = world.sql(
        "SELECT key, count(*) FROM observed WHERE what = 'once_in_5s' GROUP BY key ORDER BY key"
    )
    assert called == [("1", 1), ("2", 1)]
    worked = world.sql("SELECT count(*) FROM observed WHERE what = 'slow_work'")[0][0]
    assert worked == (1 if "child" in workflow else 0)
    logs = world.logs()
    assert "another worker owns the run" not in logs and "never retrieved" not in logs, logs
    reasons = [
        d.get("reason")
        for (d,) in world.sql("SELECT detail FROM events WHERE run_id = %s AND kind = 'waiting'", rid)
    ]
    assert "rate_limit" not in reasons, reasons
    throttled = world.sql("SELECT count(*) FROM events WHERE run_id = %s AND kind = 'throttled'", rid)
    assert throttled == [(1,)]
