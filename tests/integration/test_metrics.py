"""Prometheus metrics: a real worker process serves them while runs flow; the series named in the
README exist and move. One process, and several (prometheus-client's multiprocess mode)."""

from __future__ import annotations

import asyncio
import signal
import socket
import time
import urllib.request
from dataclasses import fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import pytest
from prometheus_client.parser import text_string_to_metric_families

from outlast import App, Client, _metrics as metrics
from outlast._model import RunRecord
from outlast.queue import Queue
from outlast.store import Store
from outlast.worker.executor import Execution, Outcome
from tests.conftest import World, wait_for

APP = "tests.apps.observed:app"
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def scrape(port: int) -> Samples | None:
    """Every sample the endpoint serves, by name and labels; None while it does not answer."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
            text = r.read().decode()
    except OSError:
        return None
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels`` (0 when none): over
    workflows, tools, processes... not given."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= ls)


def has(samples: Samples, name: str, **labels: str) -> bool:
    want = set(labels.items())
    return any(n == name and want <= ls for n, ls in samples)


def test_a_worker_serves_metrics_that_move_while_runs_flow(world: World) -> None:
    port = free_port()
    r = world.redis()
    stream = f"{world.prefix}:{{default}}:runs"
    with Client(settings=world.settings()) as c:
        # A worker killed between the intention and the dispatch of a plain write: the worker
        # serving metrics reclaims its entry and declares the operation in doubt.
        doomed = c.enqueue("observed", {"n": 0})
        killed = world.worker(APP, OUTLAST_FAILPOINTS="after_intention:note")
        assert killed.wait(30) == -signal.SIGKILL
        # Runs left unseen for longer than OUTLAST_REPUBLISH_AFTER (1 s): the sweeper re-publishes
        # them; and a poison entry, dead-lettered.
        first = [c.enqueue("observed", {"n": i}).id for i in range(1, 6)]
        for entry_id, fields in r.xrange(stream):  # two of them only the sweeper can deliver
            run = {k if isinstance(k, str) else k.decode(): v for k, v in fields.items()}.get("run")
            if (run.decode() if isinstance(run, bytes) else run) in first[:2]:
                r.xdel(stream, entry_id)
        r.xadd(stream, {"nope": "no run field"})
        time.sleep(1.5)
        world.worker(APP, "--metrics-port", str(port))
        for rid in first:
            assert c.wait(rid, timeout=30).state == "succeeded"
        wait_for(lambda: c.status(doomed.id).reason == "in_doubt", what="the gap to be declared in doubt")
        before = wait_for(
            lambda: (s := scrape(port)) and value(s, "outlast_in_doubt_open") == 1 and s,
            timeout=15,
            what="the in-doubt gauge refreshed",
        )
        # More runs flow; the counters move.
        more = [c.enqueue("observed", {"n": i}).id for i in range(10, 20)]
        for rid in more:
            assert c.wait(rid, timeout=30).state == "succeeded"
        after = wait_for(
            lambda: (s := scrape(port)) and value(s, "outlast_runs_finished_total") >= 15 and s,
            what="the later runs counted",
        )

    wf = {"workflow": "observed"}
    started = value(before, "outlast_runs_started_total", **wf)
    assert started >= 6  # 5 runs and the doomed one's retake
    assert value(after, "outlast_runs_started_total", **wf) == started + 10
    assert value(after, "outlast_runs_finished_total", state="succeeded", **wf) == 15
    ops = "outlast_operation_seconds_count"
    assert value(before, ops, tool="note", outcome="ok") == 5
    assert value(after, ops, tool="note", outcome="ok") == 15
    assert value(after, ops, tool="broken", outcome="error") == 15
    assert value(after, ops, tool="llm", outcome="ok") >= 15
    assert value(after, "outlast_operation_seconds_bucket", tool="llm", outcome="ok", le="+Inf") >= 15
    assert value(after, "outlast_operation_seconds_sum", tool="llm", outcome="ok") > 0
    # Each flaky operation fails its first dispatch (the doomed run's failed in the killed worker).
    assert value(after, "outlast_dispatch_retries_total", tool="flaky") >= 15
    assert value(after, "outlast_resolutions_total", kind="in_doubt") == 1
    assert value(after, "outlast_in_doubt_declared_total", tool="note") == 1
    assert value(after, "outlast_entries_reclaimed_total", queue="default") >= 1
    assert value(after, "outlast_republished_total", queue="default") >= 2  # their entries were gone
    assert value(after, "outlast_dead_letters_total", queue="default") == 1
    assert value(after, "outlast_commit_batch_size_count") > value(before, "outlast_commit_batch_size_count")
    assert value(after, "outlast_commit_batch_size_sum") >= value(after, "outlast_commit_batch_size_count")
    # Exported, and nothing lost: the killed worker's run was taken over, not taken from this one.
    assert has(after, "outlast_leases_lost_total") and value(after, "outlast_leases_lost_total") == 0
    assert has(after, "outlast_queue_lag_seconds", queue="default")
    assert has(after, "outlast_stream_length", queue="default")
    assert has(after, "outlast_stalled_run_seconds")
    assert 0 <= value(after, "outlast_writer_busy_ratio") <= 1
    # The threads the sync tools ran on (busy or idle): at least one.
    assert value(after, "outlast_tool_threads") >= 1 and has(after, "outlast_tool_threads", state="busy")
    assert not any("run_id" in dict(labels) for _, labels in after)  # no label per run


@pytest.mark.parametrize(
    ("listed", "counted"),
    [
        ("", {"other": 3, "": 1}),  # unset: no tenant is named
        ("acme, initech", {"acme": 2, "other": 1, "": 1}),
        ("*", {"acme": 2, "globex": 1, "": 1}),  # every tenant: the operator's choice
    ],
)
def test_the_tenant_label_names_only_the_tenants_listed(
    world: World, listed: str, counted: dict[str, float]
) -> None:
    """``OUTLAST_METRICS_TENANTS`` bounds the ``tenant`` label of the run counters: a listed
    tenant is its own value, any other ``other``, a run without a tenant ``""``."""
    port = free_port()
    world.worker(APP, "--metrics-port", str(port), OUTLAST_METRICS_TENANTS=listed)
    with Client(settings=world.settings()) as c:
        ids = [c.enqueue("nap", {"seconds": 0}, tenant=t).id for t in ("acme", "acme", "globex", None)]
        for rid in ids:
            assert c.wait(rid, timeout=30).state == "succeeded"
    samples = wait_for(
        lambda: (s := scrape(port)) and value(s, "outlast_runs_finished_total") == 4 and s,
        what="the runs counted",
    )
    for name in ("outlast_runs_started_total", "outlast_runs_finished_total"):
        by_tenant = {dict(labels)["tenant"]: v for (n, labels), v in samples.items() if n == name}
        assert by_tenant == counted, name


def test_worker_processes_share_one_endpoint(world: World) -> None:
    port = free_port()
    parent = world.worker(
        APP, "--processes", "2", "-c", "4", OUTLAST_METRICS_PORT=str(port), OUTLAST_METRICS_TENANTS="acme"
    )
    try:
        with Client(settings=world.settings()) as c:
            ids = [c.enqueue("observed", {"n": i}, tenant=["acme", "globex"][i % 2]).id for i in range(40)]
            for rid in ids:
                assert c.wait(rid, timeout=60).state == "succeeded"
        samples = wait_for(
            lambda: (s := scrape(port)) and value(s, "outlast_runs_finished_total") == 40 and s,
            what="the runs of both processes counted",
        )
        assert value(samples, "outlast_operation_seconds_count", tool="note", outcome="ok") == 40
        assert value(samples, "outlast_runs_started_total", workflow="observed") == 40
        assert value(samples, "outlast_runs_finished_total", tenant="acme") == 20  # the children's label
        assert value(samples, "outlast_runs_finished_total", tenant="other") == 20
        busy = {dict(labels)["pid"] for name, labels in samples if name == "outlast_writer_busy_ratio"}
        assert len(busy) == 2  # one busy ratio per worker process
        assert value(samples, "outlast_in_doubt_open") == 0  # the latest refresh, of either process
        assert has(samples, "outlast_stream_length", queue="default")
        assert value(samples, "outlast_commit_batch_size_count") > 0
    finally:
        parent.send_signal(signal.SIGTERM)  # forwarded to the children; the directory is removed
        assert parent.wait(30) == 0


def test_a_paused_worker_counts_the_lease_it_lost(world: World) -> None:
    port = free_port()
    with Client(settings=world.settings()) as c:
        paused = world.worker(APP, "--metrics-port", str(port))
        run = c.enqueue("nap", {"seconds": 3})
        wait_for(lambda: c.status(run.id).state == "running", what="the run to start")
        wait_for(lambda: scrape(port), what="the metrics endpoint")
        paused.send_signal(signal.SIGSTOP)  # past its lease: another worker takes the run over
        world.worker(APP)
        wait_for(lambda: c.status(run.id).fencing_token == 2, what="the takeover")
        paused.send_signal(signal.SIGCONT)
        wait_for(
            lambda: (s := scrape(port)) and value(s, "outlast_leases_lost_total") > 0,
            what="the paused worker to learn it lost the lease",
        )
        assert c.wait(run.id, timeout=30).state == "succeeded"
        samples = scrape(port)
        assert samples is not None and value(samples, "outlast_leases_lost_total") == 1  # one run, once


def test_backlog_is_the_stream_length_and_the_age_of_the_oldest_undelivered_entry(world: World) -> None:
    async def go() -> None:
        q = Queue(world.redis_url, world.prefix)
        try:
            await q.ensure_group("default")
            assert await q.backlog("default") == (0, 0.0)
            await q.publish("default", "r1")
            await asyncio.sleep(0.3)
            await q.publish("default", "r2")
            length, lag = await q.backlog("default")
            assert length == 2 and 0.3 <= lag < 5
            await q.read("default", "me", 1, 10)  # r1 delivered: r2 is now the oldest waiting
            length, lag = await q.backlog("default")
            assert length == 2 and lag < 0.3
            await q.read("default", "me", 1, 10)
            assert await q.backlog("default") == (2, 0.0)  # delivered, not yet acknowledged
        finally:
            await q.close()

    asyncio.run(go())


def test_a_fenced_write_counts_a_lease_not_already_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    """A run whose write is fenced counts its lost lease, unless a heartbeat already did (the
    heartbeat then counts it no more: ``control.lost`` is set)."""
    counted: list[str] = []
    monkeypatch.setattr(metrics, "lease_lost", lambda: counted.append("lost"))

    class Superseded:
        """The store, each of its families this same object: its one statement is refused."""

        def __getattr__(self, name: str) -> Superseded:
            return self

        async def finish(self, *args: object, **kw: object) -> bool:
            return False  # another fencing token: the write is refused

    now = datetime.now(UTC)
    row: dict[str, Any] = {f.name: None for f in fields(RunRecord)}
    row |= {"id": "r-fenced", "workflow": "gone", "input": {}, "fencing_token": 1, "attempts": 1}
    row |= {"journal_head": "", "journal_len": 0, "created_at": now, "updated_at": now}
    first = Execution(run=RunRecord(**row), app=App(), store=cast(Store, Superseded()))
    assert asyncio.run(first.execute()) == Outcome.FENCED
    assert counted == ["lost"] and first.control.lost.is_set()
    second = Execution(run=RunRecord(**row), app=App(), store=cast(Store, Superseded()))
    second.control.lost.set()  # a heartbeat found the newer token first, and counted it
    assert asyncio.run(second.execute()) == Outcome.FENCED
    assert counted == ["lost"]


def _listening_addresses(port: int) -> set[str]:
    """The local addresses (hex, as /proc/net/tcp writes them) listening on ``port``."""
    found = set()
    for row in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = row.split()[1], row.split()[3]
        address, hex_port = local.split(":")
        if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
            found.add(address)
    return found


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads /proc")
def test_the_endpoint_listens_on_the_loopback_interface_unless_told_otherwise(world: World) -> None:
    port = free_port()
    worker = world.worker(APP, "--metrics-port", str(port))
    wait_for(lambda: scrape(port), what="the metrics endpoint")
    assert _listening_addresses(port) == {"0100007F"}  # 127.0.0.1 only
    # The endpoint is up before the worker handles signals: a SIGTERM then would end it at once.
    wait_for(lambda: world.sql("SELECT count(*) FROM workers") != [(0,)], what="the worker's heartbeat")
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(30) == 0

    port = free_port()
    world.worker(APP, "--metrics-port", str(port), OUTLAST_METRICS_HOST="0.0.0.0")
    wait_for(lambda: scrape(port), what="the metrics endpoint on every interface")
    assert _listening_addresses(port) == {"00000000"}


def test_the_stalled_gauge_is_the_longest_a_running_run_went_without_progress(world: World) -> None:
    async def go() -> None:
        store = Store(world.database_url, world.schema)
        await store.open()
        try:
            assert await store.runs.run_gauges() == (0, 0.0)  # nothing runs
            for rid, ago in (("r1", 100), ("r2", 300), ("r3", 5000)):
                await store.runs.insert_run(
                    id=rid,
                    workflow="w",
                    queue="default",
                    input={},
                    input_hash="h",
                    program=None,
                    deadline_in=None,
                )
                state = "'queued'" if rid == "r3" else "'running'"  # r3 waits: not stalled, queued
                world.sql(
                    f"UPDATE runs SET state = {state}, updated_at = now() - make_interval(secs => %s) "
                    "WHERE id = %s",
                    ago,
                    rid,
                )
            in_doubt, stalled = await store.runs.run_gauges()
            assert in_doubt == 0 and 300 <= stalled < 360
        finally:
            await store.close()

    asyncio.run(go())
