"""outlast's throughput: N runs of K operations served by one worker in this process or by W
worker processes, with the writer as outlast makes it or with one of two bench-only variants
(one write per commit; a commit per write on a pool of connections). Also the worker process the
probes start, and the helpers that create, fill and check a schema."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import multiprocessing
import os
import time
from collections.abc import Callable
from multiprocessing.synchronize import Event as MpEvent
from typing import Any

import psycopg
import psycopg_pool
import workload
from common import Config, Result, drop_schema, flush_redis, host_cpu, proc_cpu, tag
from psycopg.rows import dict_row

import outlast.store.writer as writer_module
from outlast._logs import configure
from outlast.queue import Queue
from outlast.settings import Settings
from outlast.store import Store
from outlast.worker import eventloop
from outlast.worker.loop import Worker

Row = dict[str, Any]
WRITERS = ("shared", "one-per-commit", "pool")


def time_writer(writer: Any) -> None:
    """Count the writer's busy time from now: the seconds it spends committing (and retrying),
    which each of its lanes adds up itself."""
    for lane in writer.lanes:
        lane.busy = 0.0


class ConnectionPerWriteWriter:
    """A commit per write without a single writer: each write is one autocommit statement on a
    connection of a pool, so concurrent runs commit concurrently (one round trip each).

    A run's own writes still commit in the order they were queued, as the worker expects of any
    writer: it queues a run's held journal entries and then its final state without waiting in
    between (the final state is refused unless the entries are written). Without that order the
    final state raced its entries on another connection, was refused, and the run waited a whole
    lease to be reclaimed: 6 runs/s, a 30 s round."""

    def __init__(self, url: str, schema: str, size: int) -> None:
        self.pool = psycopg_pool.AsyncConnectionPool(
            url,
            min_size=size,
            max_size=size,
            open=False,
            kwargs={"autocommit": True, "options": f"-c search_path={schema}"},
        )
        self._opened = False
        self._opening = asyncio.Lock()
        self._last: dict[str, asyncio.Future[None]] = {}  # per run: its latest write's end
        self.commits = 0
        self.writes = 0
        self.busy = 0.0  # read by the worker's metrics step; not measured for this variant

    def submit(self, statement: str, params: dict[str, Any], key: str = "") -> asyncio.Future[list[Row]]:
        """Queued now, as the shared writer's ``submit``: tasks start in the order they are made,
        so each run's writes are queued (and committed) in order."""
        return asyncio.ensure_future(self.write(statement, params, key))

    async def write(self, statement: str, params: dict[str, Any], key: str = "") -> list[dict[str, Any]]:
        if not key:
            return await self._write(statement, params)
        before = self._last.get(key)  # taken when queued, before any await: the queueing order
        mine = self._last[key] = asyncio.get_running_loop().create_future()
        try:
            if before is not None:
                await asyncio.wait([before])  # its outcome is its own caller's
            return await self._write(statement, params)
        finally:
            mine.set_result(None)
            if self._last.get(key) is mine:
                del self._last[key]

    async def _write(self, statement: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        if not self._opened:
            async with self._opening:
                if not self._opened:
                    await self.pool.open(wait=True)
                    self._opened = True
        async with self.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(statement.encode(), params)
            rows = await cur.fetchall() if cur.description else []
        self.commits += 1
        self.writes += 1
        return rows

    async def close(self) -> None:
        await self.pool.close()


def make_store(s: Settings, writer: str = "shared", pool: int = 16) -> Store:
    assert s.database_url
    store = Store(s.database_url, s.schema, max_size=4, in_flight=s.writer_in_flight)  # as a worker
    if writer == "pool":
        store.writer = ConnectionPerWriteWriter(s.database_url, s.schema, pool)  # type: ignore[assignment]
    else:
        writer_module.MAX_BATCH = 1 if writer == "one-per-commit" else 256
        time_writer(store.writer)
    return store


def writer_stats(store: Store) -> tuple[int, int, float | None]:
    w = store.writer
    return w.commits, w.writes, None if isinstance(w, ConnectionPerWriteWriter) else w.busy


def settings(cfg: Config, **changes: Any) -> Settings:
    t = tag()
    base: dict[str, Any] = {
        "database_url": cfg.database_url,
        "redis_url": cfg.redis_url,
        "schema": f"bench_{t}",
        "prefix": f"bench{t}",
        "concurrency": cfg.concurrency,
        "worker_name": f"bench-{t}",
        "log_format": "json",
    }
    return Settings(**(base | changes))


async def migrate(s: Settings) -> None:
    assert s.database_url
    store = Store(s.database_url, s.schema)
    await store.open(check=False)
    await store.migrate()
    await store.close()


def fresh(s: Settings) -> None:
    """An empty Redis and a migrated schema for ``s`` (drop it with ``drop_schema``)."""
    assert s.redis_url
    flush_redis(s.redis_url)
    asyncio.run(migrate(s))


async def enqueue_all(s: Settings, workflow: str, inputs: list[dict[str, Any]]) -> float:
    """Enqueue the runs, 100 at a time; the seconds it took (not part of a measurement)."""
    from outlast import AsyncClient  # on use: the spawned workers import this module too

    t = time.perf_counter()
    async with AsyncClient(settings=s, app=workload.app) as client:
        for i in range(0, len(inputs), 100):
            await client.enqueue_many(workflow, inputs[i : i + 100])
    return time.perf_counter() - t


async def wait_final(s: Settings, n: int, timeout: float = 300.0) -> None:
    assert s.database_url
    until = time.monotonic() + timeout
    async with await psycopg.AsyncConnection.connect(
        s.database_url, autocommit=True, options=f"-c search_path={s.schema}"
    ) as conn:
        while True:
            cur = await conn.execute("SELECT count(*) FROM runs WHERE state NOT IN ('queued', 'running')")
            row = await cur.fetchone()
            if row is not None and row[0] >= n:
                return
            if time.monotonic() > until:
                raise SystemExit(f"outlast: only {row and row[0]} of {n} runs final after {timeout}s")
            await asyncio.sleep(0.005)


def check_steps(s: Settings, runs: int, k: int, journaled: bool = True) -> None:
    """Every run succeeded with result K and (``journaled``) 2K journal entries: nothing was skipped."""
    assert s.database_url
    with psycopg.connect(s.database_url, options=f"-c search_path={s.schema}") as c:
        cur = c.execute(
            "SELECT count(*) FILTER (WHERE state = 'succeeded' AND result = to_jsonb(%s::int)), "
            "count(*) FROM runs",
            (k,),
        )
        ok, total = cur.fetchone() or (0, 0)
        entries = c.execute("SELECT count(*) FROM journal").fetchone()
    if ok != runs or total != runs:
        raise SystemExit(f"outlast: {ok} of {total} runs succeeded with the right result")
    if journaled and entries != (runs * k * 2,):
        raise SystemExit(f"outlast: {entries} journal entries, expected {runs * k * 2}")


# -- worker processes --------------------------------------------------------------------------


async def serve(s: Settings, writer: str, pool: int, go: MpEvent | None, stop: MpEvent) -> tuple[Any, ...]:
    """One worker: ready, wait for go, serve until stop; report CPU and the writer's counts."""
    store = make_store(s, writer, pool)
    await store.open()
    assert s.redis_url
    queue = Queue(s.redis_url, s.prefix)
    worker = Worker(workload.app, store, queue, s, [s.queue])
    eventloop.pace_collector()  # as `outlast worker` does
    if go is not None:
        await asyncio.to_thread(go.wait)
    cpu = proc_cpu()
    task = asyncio.create_task(worker.run())
    await asyncio.to_thread(stop.wait)
    cpu = proc_cpu() - cpu
    worker.stop()
    await task
    stats = writer_stats(store)
    await store.close()
    await queue.close()
    return (cpu, *stats, store.reads)


def worker_process(
    s: Settings, writer: str, pool: int, ready: Any, go: MpEvent | None, stop: MpEvent, out: Any
) -> None:
    configure("json", logging.WARNING)
    ready.put(os.getpid())
    out.put(eventloop.run(serve(s, writer, pool, go, stop), s.event_loop))  # as `outlast worker` does


class Workers:
    """W outlast worker processes (spawned), started together on ``go``."""

    def __init__(self, s: Settings, count: int, writer: str = "shared", pool: int = 16, gated: bool = True):
        ctx = multiprocessing.get_context("spawn")
        self.ready, self.out = ctx.Queue(), ctx.Queue()
        self.go = ctx.Event() if gated else None
        self.stop = ctx.Event()
        self.procs = [
            ctx.Process(
                target=worker_process,
                args=(
                    s.with_(worker_name=f"{s.worker_name}-{i}"),
                    writer,
                    pool,
                    self.ready,
                    self.go,
                    self.stop,
                    self.out,
                ),
            )
            for i in range(count)
        ]
        for p in self.procs:
            p.start()
        self.pids = [self.ready.get(timeout=60) for _ in self.procs]
        time.sleep(0.3)  # let each child open its store and reach go.wait()

    def finish(self, alive: int | None = None) -> list[tuple[Any, ...]]:
        self.stop.set()
        n = len(self.procs) if alive is None else alive
        reports = [self.out.get(timeout=60) for _ in range(n)]
        for p in self.procs:
            p.join(30)
        return reports


# -- throughput ----------------------------------------------------------------------------------


async def in_process(s: Settings, runs: int, writer: str, pool: int) -> tuple[float, float, float, Store]:
    store = make_store(s, writer, pool)
    await store.open()
    assert s.redis_url
    queue = Queue(s.redis_url, s.prefix)
    worker = Worker(workload.app, store, queue, s, [s.queue])
    eventloop.pace_collector()  # as `outlast worker` does
    with host_cpu() as busy:
        cpu = proc_cpu()
        t0 = time.perf_counter()
        task = asyncio.create_task(worker.run())
        await wait_final(s, runs)
        seconds = time.perf_counter() - t0
        cpu = proc_cpu() - cpu
    worker.stop()
    await task
    await store.close()
    await queue.close()
    return seconds, cpu, busy[0], store


def measure(
    cfg: Config,
    k: int,
    processes: int = 1,
    writer: str = "shared",
    concurrency: int | None = None,
    in_flight: int | None = None,
) -> Callable[[str], Result]:
    """A measurement of outlast, to run (``measure(...)(name)``) once per round."""

    def run(name: str) -> Result:
        s = settings(cfg, concurrency=concurrency or cfg.concurrency)
        if in_flight is not None:
            s = dataclasses.replace(s, writer_in_flight=in_flight)
        fresh(s)
        try:
            enq = asyncio.run(enqueue_all(s, "steps", [{"k": k, "tool": cfg.tool}] * cfg.runs))
            if processes <= 1:
                drained = in_process(s, cfg.runs, writer, cfg.pool)
                seconds, cpu, busy, store = eventloop.run(drained, s.event_loop)
                commits, writes, wbusy = writer_stats(store)
            else:
                seconds, cpu, busy, commits, writes, wbusy = in_processes(
                    s, cfg.runs, processes, writer, cfg.pool
                )
            check_steps(s, cfg.runs, k)
        finally:
            drop_schema(cfg.database_url, s.schema)
            writer_module.MAX_BATCH = 256
        return Result(
            name, k, processes, cfg.runs, seconds, cpu, busy, commits, writes, wbusy, {"enqueue_s": enq}
        )

    return run


def in_processes(
    s: Settings, runs: int, processes: int, writer: str, pool: int
) -> tuple[float, float, float, int, int, float | None]:
    workers = Workers(s, processes, writer, pool)
    assert workers.go is not None
    with host_cpu() as busy:
        t0 = time.perf_counter()
        workers.go.set()
        asyncio.run(wait_final(s, runs))
        seconds = time.perf_counter() - t0
    reports = workers.finish()  # CPU counted up to the stop: a few ms more than ``seconds``
    wbusy = [r[3] for r in reports if r[3] is not None]
    return (
        seconds,
        sum(r[0] for r in reports),
        busy[0],
        sum(r[1] for r in reports),
        sum(r[2] for r in reports),
        sum(wbusy) if wbusy else None,
    )
