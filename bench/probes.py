"""outlast's probes, each against worker processes as ``outlast worker`` runs them:
- latency at light load: the enqueue call, enqueue -> the workflow starting, and the time per
  operation inside a run (one run at a time, 20 ms apart);
- takeover: a worker is SIGKILLed (at a random phase of its lease renewal) while it holds a run;
  how long until another worker holds it, with no backlog and with one;
- replay: a run with K journaled operations resumes (after a durable sleep): the time from the
  workflow's start to its first crossing past the journal, plus the journal's load query;
- memory: the worker process's RSS while it holds C runs at once."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import time
from typing import Any

import psycopg
import workload
from common import Config, drop_schema, percentile, rss_mb
from outlast_runs import Workers, fresh, settings, wait_final

from outlast.settings import Settings


def _sql(s: Settings, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    assert s.database_url
    with psycopg.connect(s.database_url, autocommit=True, options=f"-c search_path={s.schema}") as c:
        return c.execute(query, params).fetchall()


def latency(cfg: Config, samples: int, k: int = 5) -> dict[str, float]:
    s = settings(cfg)
    fresh(s)
    workers = Workers(s, 1, gated=False)
    try:
        stamps = asyncio.run(_enqueue_spaced(s, samples, k))
        asyncio.run(wait_final(s, samples + 1))  # and the warm-up run
        rows = dict(_sql(s, "SELECT id, result FROM runs WHERE state = 'succeeded'"))
        workers.finish()
    finally:
        drop_schema(cfg.database_url, s.schema)
    call = [after - before for _, before, after in stamps]
    start = [rows[rid][0] - before for rid, before, _ in stamps]
    per_op = [(rows[rid][1] - rows[rid][0]) / k for rid, _, _ in stamps]
    ms = 1000.0
    return {
        "enqueue call p50 ms": ms * percentile(call, 0.5),
        "enqueue call p99 ms": ms * percentile(call, 0.99),
        "enqueue->start p50 ms": ms * percentile(start, 0.5),
        "enqueue->start p99 ms": ms * percentile(start, 0.99),
        "per-operation p50 ms": ms * percentile(per_op, 0.5),
        "per-operation p99 ms": ms * percentile(per_op, 0.99),
    }


async def _enqueue_spaced(s: Settings, samples: int, k: int) -> list[tuple[str, float, float]]:
    from outlast import AsyncClient  # on use: the spawned workers import this module too

    out = []
    async with AsyncClient(settings=s, app=workload.app) as client:
        await client.enqueue("timed", {"k": 1})  # warm: connections open, worker ready
        await asyncio.sleep(0.5)
        for i in range(samples):
            before = time.time()
            await client.enqueue("timed", {"k": k}, run_id=f"lat{i}")
            out.append((f"lat{i}", before, time.time()))
            await asyncio.sleep(0.02)
    return out


def takeover(cfg: Config, ttl: float, backlog: int = 0) -> float:
    """Seconds from SIGKILL of the run's holder to another worker holding it (new fencing token)."""
    s = settings(cfg, lease_ttl=ttl)
    fresh(s)
    first = Workers(s, 1, gated=False)
    second: Workers | None = None
    try:
        asyncio.run(_enqueue(s, "hold", [{"seconds": 4 * ttl + 5}], "held"))
        _until(lambda: _sql(s, "SELECT 1 FROM runs WHERE id = 'held' AND state = 'running'"), 30)
        if backlog:
            asyncio.run(_enqueue(s, "steps", [{"k": 5}] * backlog))
        second = Workers(s.with_(worker_name=f"{s.worker_name}-b"), 1, gated=False)
        time.sleep(0.5 + random.uniform(0, ttl / 3))  # any phase of the lease's renewal period
        killed = time.monotonic()
        os.kill(first.pids[0], signal.SIGKILL)
        _until(lambda: _sql(s, "SELECT 1 FROM runs WHERE id = 'held' AND fencing_token >= 2"), 10 * ttl + 30)
        return time.monotonic() - killed
    finally:
        for w in (first, second):
            for pid in w.pids if w else []:
                try:
                    os.kill(pid, signal.SIGKILL)  # our own worker processes; the run is a dummy
                except ProcessLookupError:
                    pass
            for p in w.procs if w else []:
                p.join(10)
        drop_schema(cfg.database_url, s.schema)


async def _enqueue(
    s: Settings, workflow: str, inputs: list[dict[str, Any]], run_id: str | None = None
) -> None:
    from outlast import AsyncClient

    async with AsyncClient(settings=s, app=workload.app) as client:
        if run_id is not None:
            await client.enqueue(workflow, inputs[0], run_id=run_id)
        else:
            for i in range(0, len(inputs), 100):
                await client.enqueue_many(workflow, inputs[i : i + 100])


def _until(ready: Any, timeout: float) -> None:
    until = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > until:
            raise RuntimeError(f"not reached within {timeout}s")
        time.sleep(0.01)


def replay(cfg: Config, k: int) -> dict[str, float]:
    s = settings(cfg, sweep_interval=0.1)  # the sweeper wakes the run after its durable sleep
    fresh(s)
    workers = Workers(s, 1, gated=False)
    try:
        asyncio.run(_enqueue(s, "resume_probe", [{"k": k}], "long"))
        _until(
            lambda: _sql(
                s, "SELECT 1 FROM runs WHERE id = 'long' AND state NOT IN ('queued', 'running', 'waiting')"
            ),
            120,
        )
        workers.finish()
        ((state, seconds),) = _sql(s, "SELECT state, result FROM runs WHERE id = 'long'")
        if state != "succeeded":
            raise RuntimeError(f"replay probe ended {state}")
        assert s.database_url
        with psycopg.connect(s.database_url, options=f"-c search_path={s.schema}") as c:
            loads = []
            for _ in range(5):
                t = time.perf_counter()
                c.execute(
                    "SELECT seq, kind, op_id, body, hash FROM journal WHERE run_id = 'long' ORDER BY seq"
                ).fetchall()
                loads.append(time.perf_counter() - t)
    finally:
        drop_schema(cfg.database_url, s.schema)
    return {"replay ms": 1000 * seconds, "journal load ms": 1000 * percentile(loads, 0.5)}


def memory(cfg: Config, concurrent: int, hold: float) -> dict[str, float]:
    s = settings(cfg, concurrency=concurrent)
    fresh(s)
    workers = Workers(s, 1, gated=False)
    pid = workers.pids[0]
    try:
        idle = rss_mb(pid)
        asyncio.run(_enqueue(s, "hold", [{"seconds": hold}] * concurrent))
        peak, most = idle, 0
        until = time.monotonic() + hold + 60
        while time.monotonic() < until:
            ((running,),) = _sql(s, "SELECT count(*) FROM runs WHERE state = 'running'")
            most = max(most, running)
            peak = max(peak, rss_mb(pid))
            ((final,),) = _sql(s, "SELECT count(*) FROM runs WHERE state = 'succeeded'")
            if final >= concurrent:
                break
            time.sleep(0.1)
        workers.finish()
    finally:
        drop_schema(cfg.database_url, s.schema)
    return {"RSS idle MB": idle, "RSS peak MB": peak, "runs held at once": float(most)}
