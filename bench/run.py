"""outlast side by side with peers, in one run, on the same Postgres and the same Redis.

    python bench/run.py [--runs N] [--ops K] [--concurrency C] [--processes W] [--pool P] [--repeat R]

Systems measured, in R interleaved rounds (the table shows each system's median round; its ratio
to outlast is the median of the rounds' ratios):
  outlast                 N runs of a workflow doing K ``run.call``s of a trivial idempotent tool
  outlast, 1 write/commit the same, the writer limited to one write per transaction (MAX_BATCH = 1)
  outlast, P connections  the same, every write its own autocommit statement on a pool of P
                          connections (commit per write, Postgres' own group commit may help)
  RQ SimpleWorker         N jobs each doing the same K steps in one job (no per-step durability)
  RQ Worker (fork)        the same with RQ's default worker, one fork per job
  psycopg, raw            N*K INSERT+COMMIT round trips on one connection: the floor of a commit per write

Postgres: --database-url (default the project's test server); each system gets its own schema,
dropped afterwards. Redis: a private ``redis-server`` on a free port (no persistence), flushed
between systems and stopped at the end. Extras: ``pip install rq``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import multiprocessing
import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from multiprocessing.synchronize import Event as MpEvent
from pathlib import Path
from typing import Any

import psycopg
import psycopg_pool
import redis
from psycopg import sql
from psycopg.rows import dict_row

import outlast
import outlast.store.writer as writer_module
from outlast import AsyncClient
from outlast.logs import configure
from outlast.queue import Queue
from outlast.settings import Settings
from outlast.store import Store
from outlast.store.writer import Writer
from outlast.worker.loop import Worker

try:
    import rq
except ImportError:  # the bench's own extra, not a dependency of outlast
    sys.exit("the bench compares with RQ: pip install rq")

import workload  # bench/workload.py: this script's directory is on sys.path

DEFAULT_DB = "postgresql://postgres@127.0.0.1:5432/test"


@dataclass(frozen=True)
class Config:
    database_url: str
    redis_url: str
    runs: int
    ops: int
    concurrency: int
    processes: int
    pool: int  # connections of the commit-per-write pool, per process
    tool: str


@dataclass(frozen=True)
class Result:
    name: str
    runs: int
    ops: int
    seconds: float
    cpu: float  # CPU seconds of the process(es) doing the work, during the measurement
    host_busy: float  # busy core-seconds of the whole machine during the measurement
    commits: int | None = None
    writes: int | None = None
    writer_busy: float | None = None  # seconds the writer(s) spent committing
    enqueue_seconds: float | None = None


# -- instrumented writers (bench only) ----------------------------------------------------


class TimedWriter(Writer):
    """outlast's Writer, unchanged, with the time spent in commits added up."""

    def __init__(self, connect: Any) -> None:
        super().__init__(connect)
        self.busy = 0.0

    async def _commit(self, batch: list[Any]) -> None:
        t = time.perf_counter()
        try:
            await super()._commit(batch)
        finally:
            self.busy += time.perf_counter() - t


class ConnectionPerWriteWriter(Writer):
    """A commit per write without a single writer: each write is one autocommit statement on
    a connection of a pool, so concurrent runs commit concurrently (one round trip each)."""

    def __init__(self, url: str, schema: str, size: int) -> None:
        super().__init__(None)
        self.pool = psycopg_pool.AsyncConnectionPool(
            url,
            min_size=size,
            max_size=size,
            open=False,
            kwargs={"autocommit": True, "options": f"-c search_path={schema}"},
        )
        self._opened = False
        self._opening = asyncio.Lock()

    async def write(self, statement: str, params: dict[str, Any]) -> list[dict[str, Any]]:
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


# -- outlast ---------------------------------------------------------------------------------

WRITERS = ("shared", "one-per-commit", "pool")


def make_store(s: Settings, writer: str, pool: int) -> Store:
    assert s.database_url
    store = Store(s.database_url, s.schema, max_size=4)  # as run_worker makes it
    if writer == "pool":
        store.writer = ConnectionPerWriteWriter(s.database_url, s.schema, pool)
    else:
        writer_module.MAX_BATCH = 1 if writer == "one-per-commit" else 256
        store.writer = TimedWriter(store._connect)
    return store


def writer_stats(store: Store) -> tuple[int, int, float | None]:
    w = store.writer
    busy = w.busy if isinstance(w, TimedWriter) else None
    return w.commits, w.writes, busy


async def serve_until(s: Settings, writer: str, pool: int, go: MpEvent, stop: MpEvent) -> tuple[Any, ...]:
    """One worker process: ready, wait for go, serve until stop; report CPU and writer counts."""
    store = make_store(s, writer, pool)
    await store.open()
    assert s.redis_url
    queue = Queue(s.redis_url, s.prefix)
    worker = Worker(workload.app, store, queue, s, [s.queue])
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
    return (cpu, *stats)


def worker_process(
    s: Settings, writer: str, pool: int, ready: Any, go: MpEvent, stop: MpEvent, out: Any
) -> None:
    configure("json", logging.WARNING)
    ready.put(os.getpid())
    out.put(asyncio.run(serve_until(s, writer, pool, go, stop)))


async def migrate(s: Settings) -> None:
    assert s.database_url
    store = Store(s.database_url, s.schema)
    await store.open(check=False)
    await store.migrate()
    await store.close()


def drop_schema(url: str, schema: str) -> None:
    with psycopg.connect(url, autocommit=True) as c:
        c.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


async def enqueue_all(s: Settings, cfg: Config) -> float:
    """Enqueue N runs, 32 at a time; return the seconds it took (not part of the measurement)."""
    t = time.perf_counter()
    async with AsyncClient(settings=s, app=workload.app) as client:
        todo = list(range(cfg.runs))
        while todo:
            chunk, todo = todo[:32], todo[32:]
            await asyncio.gather(
                *(client.enqueue("steps", {"k": cfg.ops, "tool": cfg.tool}, run_id=f"r{i}") for i in chunk)
            )
    return time.perf_counter() - t


async def wait_finished(s: Settings, n: int, timeout: float = 300.0) -> None:
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
                raise SystemExit(f"outlast: only {row and row[0]} of {n} runs finished after {timeout}s")
            await asyncio.sleep(0.01)


def check_outlast(s: Settings, cfg: Config) -> None:
    assert s.database_url
    with psycopg.connect(s.database_url, options=f"-c search_path={s.schema}") as c:
        cur = c.execute(
            "SELECT count(*) FILTER (WHERE state = 'succeeded' AND result = to_jsonb(%s::int)), "
            "count(*) FROM runs",
            (cfg.ops,),
        )
        ok, total = cur.fetchone() or (0, 0)
        journaled = c.execute("SELECT count(*) FROM journal").fetchone()
    if ok != cfg.runs or total != cfg.runs:
        raise SystemExit(f"outlast: {ok} of {total} runs succeeded with the right result")
    if journaled != (cfg.runs * cfg.ops * 2,):
        raise SystemExit(f"outlast: {journaled} journal entries, expected {cfg.runs * cfg.ops * 2}")


async def outlast_in_process(s: Settings, cfg: Config, writer: str) -> tuple[float, float, float, Store]:
    store = make_store(s, writer, cfg.pool)
    await store.open()
    assert s.redis_url
    queue = Queue(s.redis_url, s.prefix)
    worker = Worker(workload.app, store, queue, s, [s.queue])
    with host_cpu() as busy:
        cpu = proc_cpu()
        t0 = time.perf_counter()
        task = asyncio.create_task(worker.run())
        await wait_finished(s, cfg.runs)
        seconds = time.perf_counter() - t0
        cpu = proc_cpu() - cpu
    worker.stop()
    await task
    await store.close()
    await queue.close()
    return seconds, cpu, busy[0], store


def measure_outlast(name: str, cfg: Config, writer: str) -> Result:
    tag = uuid.uuid4().hex[:10]
    s = Settings(
        database_url=cfg.database_url,
        redis_url=cfg.redis_url,
        schema=f"bench_{tag}",
        prefix=f"bench{tag}",
        concurrency=cfg.concurrency,
        worker_name=f"bench-{tag}",
        log_format="json",
    )
    flush_redis(cfg.redis_url)
    asyncio.run(migrate(s))
    try:
        enqueue_seconds = asyncio.run(enqueue_all(s, cfg))
        if cfg.processes <= 1:
            seconds, cpu, busy, store = asyncio.run(outlast_in_process(s, cfg, writer))
            commits, writes, writer_busy = writer_stats(store)
        else:
            seconds, cpu, busy, commits, writes, writer_busy = outlast_processes(s, cfg, writer)
        check_outlast(s, cfg)
    finally:
        drop_schema(cfg.database_url, s.schema)
        writer_module.MAX_BATCH = 256
    return Result(
        name, cfg.runs, cfg.runs * cfg.ops, seconds, cpu, busy, commits, writes, writer_busy, enqueue_seconds
    )


def outlast_processes(
    s: Settings, cfg: Config, writer: str
) -> tuple[float, float, float, int, int, float | None]:
    ctx = multiprocessing.get_context("spawn")
    ready, out = ctx.Queue(), ctx.Queue()
    go, stop = ctx.Event(), ctx.Event()
    procs = [
        ctx.Process(
            target=worker_process,
            args=(s.with_(worker_name=f"{s.worker_name}-{i}"), writer, cfg.pool, ready, go, stop, out),
        )
        for i in range(cfg.processes)
    ]
    for p in procs:
        p.start()
    for _ in procs:
        ready.get(timeout=60)
    time.sleep(0.3)  # let each child open its store and reach go.wait()
    with host_cpu() as busy:
        t0 = time.perf_counter()
        go.set()
        asyncio.run(wait_finished(s, cfg.runs))
        seconds = time.perf_counter() - t0
        stop.set()
        reports = [out.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(30)
    cpu = sum(r[0] for r in reports)
    commits = sum(r[1] for r in reports)
    writes = sum(r[2] for r in reports)
    wbusy = [r[3] for r in reports if r[3] is not None]
    return seconds, cpu, busy[0], commits, writes, (sum(wbusy) if wbusy else None)


# -- RQ ----------------------------------------------------------------------------------------


def rq_worker_process(redis_url: str, ready: Any, go: MpEvent, out: Any) -> None:
    conn = redis.Redis.from_url(redis_url)
    w = rq.SimpleWorker([rq.Queue("bench", connection=conn)], connection=conn)
    ready.put(os.getpid())
    go.wait()
    cpu = proc_cpu()
    w.work(burst=True, logging_level="WARNING")
    out.put(proc_cpu() - cpu)


def measure_rq(name: str, cfg: Config, fork: bool) -> Result:
    flush_redis(cfg.redis_url)
    conn = redis.Redis.from_url(cfg.redis_url)
    q = rq.Queue("bench", connection=conn)
    t = time.perf_counter()
    jobs = [
        rq.Queue.prepare_data(workload.rq_steps, args=(cfg.ops,), result_ttl=3600) for _ in range(cfg.runs)
    ]
    q.enqueue_many(jobs)
    enqueue_seconds = time.perf_counter() - t
    if cfg.processes <= 1:
        worker_class = rq.Worker if fork else rq.SimpleWorker
        w = worker_class([q], connection=conn)
        with host_cpu() as busy:
            cpu = proc_cpu()
            t0 = time.perf_counter()
            w.work(burst=True, logging_level="WARNING")
            seconds = time.perf_counter() - t0
            cpu = proc_cpu() - cpu
    else:
        seconds, cpu, busy = rq_processes(cfg)
    done = q.finished_job_registry.count
    if done != cfg.runs:
        raise SystemExit(f"RQ: {done} of {cfg.runs} jobs finished")
    conn.close()
    return Result(name, cfg.runs, cfg.runs * cfg.ops, seconds, cpu, busy[0], enqueue_seconds=enqueue_seconds)


def rq_processes(cfg: Config) -> tuple[float, float, list[float]]:
    ctx = multiprocessing.get_context("spawn")
    ready, out = ctx.Queue(), ctx.Queue()
    go = ctx.Event()
    procs = [
        ctx.Process(target=rq_worker_process, args=(cfg.redis_url, ready, go, out))
        for _ in range(cfg.processes)
    ]
    for p in procs:
        p.start()
    for _ in procs:
        ready.get(timeout=60)
    with host_cpu() as busy:
        t0 = time.perf_counter()
        go.set()
        for p in procs:
            p.join(300)
        seconds = time.perf_counter() - t0
    cpu = sum(out.get(timeout=10) for _ in procs)
    return seconds, cpu, busy


# -- raw psycopg -------------------------------------------------------------------------------


def measure_raw(name: str, cfg: Config) -> Result:
    schema = f"bench_raw_{uuid.uuid4().hex[:10]}"
    try:
        with psycopg.connect(cfg.database_url, autocommit=True) as c:
            c.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
            c.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
            c.execute("CREATE TABLE steps (run int, step int, x int, PRIMARY KEY (run, step))")
            with host_cpu() as busy:
                cpu = proc_cpu()
                t0 = time.perf_counter()
                for run in range(cfg.runs):
                    for step in range(cfg.ops):
                        c.execute("INSERT INTO steps VALUES (%s, %s, %s)", (run, step, step + 1))
                seconds = time.perf_counter() - t0
                cpu = proc_cpu() - cpu
    finally:
        drop_schema(cfg.database_url, schema)
    n = cfg.runs * cfg.ops
    return Result(name, cfg.runs, n, seconds, cpu, busy[0], commits=n, writes=n)


# -- the machine and the private Redis ---------------------------------------------------------


def proc_cpu() -> float:
    """CPU seconds of this process and of its waited-for children (RQ's forked work horses)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def busy_ticks() -> int:
    """Busy jiffies of the whole machine (all but idle and iowait), from /proc/stat."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    return sum(fields) - fields[3] - fields[4]


@contextmanager
def host_cpu() -> Iterator[list[float]]:
    """Yields a one-element list set, on exit, to the machine's busy core-seconds meanwhile."""
    out = [0.0]
    busy = busy_ticks()
    try:
        yield out
    finally:
        out[0] = (busy_ticks() - busy) / os.sysconf("SC_CLK_TCK")


def outlast_source() -> str:
    """Where the measured outlast comes from, and its commit (+dirty) when it is a git checkout."""
    root = Path(outlast.__file__).resolve().parents[1]
    git = ["git", "-C", str(root)]
    head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    if head.returncode != 0:
        return f"outlast from {root} (not a git checkout)"
    dirty = subprocess.run([*git, "status", "--porcelain", "--", "outlast"], capture_output=True, text=True)
    return f"outlast {head.stdout.strip()}{'+dirty' if dirty.stdout.strip() else ''} from {root}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextmanager
def private_redis() -> Iterator[str]:
    exe = shutil.which("redis-server")
    if exe is None:
        sys.exit("the bench starts a private redis-server: none on PATH")
    port = free_port()
    proc = subprocess.Popen(
        [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    try:
        r = redis.Redis.from_url(url)
        for _ in range(100):
            try:
                r.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)
        r.close()
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


def flush_redis(url: str) -> None:
    r = redis.Redis.from_url(url)
    r.flushdb()  # the bench's private server only
    r.close()


# -- report ------------------------------------------------------------------------------------


def median_result(results: list[Result]) -> Result:
    """The repetition with the median time."""
    ordered = sorted(results, key=lambda r: r.seconds)
    return ordered[len(ordered) // 2]


def median_ratio(results: list[Result], ref: list[Result]) -> float:
    """Throughput relative to the reference, the median of the rounds' ratios: each round measures
    every system once, back to back, so a ratio within a round cancels the machine's drift."""
    ratios = sorted((r.ops / r.seconds) / (o.ops / o.seconds) for r, o in zip(results, ref, strict=True))
    return ratios[len(ratios) // 2]


def fmt(v: float | None, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def table(results: list[Result], ratios: list[float]) -> str:
    head = (
        "| system | runs/s | ops/s | / outlast | writes/commit | writer busy | worker CPU | host CPU |",
        "|---|--:|--:|--:|--:|--:|--:|--:|",
    )
    lines = list(head)
    for r, ratio in zip(results, ratios, strict=True):
        rate = r.ops / r.seconds
        per_commit = None if not r.commits or r.writes is None else r.writes / r.commits
        commits = "-" if r.commits is None else f"{per_commit:.1f} ({r.writes}/{r.commits})"
        wbusy = None if r.writer_busy is None else 100 * r.writer_busy / r.seconds
        lines.append(
            f"| {r.name} | {r.runs / r.seconds:,.0f} | {rate:,.0f} | {ratio:.2f}x | {commits} "
            f"| {fmt(wbusy, '.0f')}{'' if wbusy is None else '%'} | {100 * r.cpu / r.seconds:.0f}% "
            f"| {100 * r.host_busy / r.seconds:.0f}% |"
        )
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=200, help="runs (RQ: jobs) per system (default 200)")
    p.add_argument("--ops", type=int, default=10, help="steps per run (default 10)")
    p.add_argument("--concurrency", type=int, default=32, help="outlast worker concurrency (default 32)")
    p.add_argument("--pool", type=int, default=16, help="connections of the commit-per-write pool")
    p.add_argument("--processes", type=int, default=1, help="worker processes per system (default 1)")
    p.add_argument("--repeat", type=int, default=3, help="measure each system R times, keep the median")
    p.add_argument("--sync-tool", action="store_true", help="outlast calls a sync tool (run in a thread)")
    p.add_argument("--database-url", default=os.environ.get("OUTLAST_BENCH_DATABASE_URL", DEFAULT_DB))
    args = p.parse_args()
    configure("json", logging.WARNING)
    load_before = os.getloadavg()[0]

    with private_redis() as redis_url:
        cfg = Config(
            args.database_url,
            redis_url,
            args.runs,
            args.ops,
            args.concurrency,
            args.processes,
            args.pool,
            "bump_sync" if args.sync_tool else "bump",
        )
        systems: list[tuple[str, Callable[[str], Result]]] = [
            ("outlast", lambda n: measure_outlast(n, cfg, "shared")),
            ("outlast, 1 write per commit", lambda n: measure_outlast(n, cfg, "one-per-commit")),
            (
                f"outlast, commit per write on {cfg.pool} conns",
                lambda n: measure_outlast(n, cfg, "pool"),
            ),
            ("RQ SimpleWorker (1 job = K steps)", lambda n: measure_rq(n, cfg, fork=False)),
            ("psycopg raw, INSERT+COMMIT per step", lambda n: measure_raw(n, cfg)),
        ]
        if cfg.processes <= 1:
            systems.insert(4, ("RQ Worker, fork per job", lambda n: measure_rq(n, cfg, fork=True)))
        results: dict[str, list[Result]] = {name: [] for name, _ in systems}
        started = time.perf_counter()
        for i in range(args.repeat):  # interleaved, so that drift hits every system alike
            for name, measure in systems:
                results[name].append(measure(name))
                print(f"  [{i + 1}/{args.repeat}] {name}: {results[name][-1].seconds:.2f}s", file=sys.stderr)
        final = [median_result(rs) for rs in results.values()]
        outlast_rounds = results[systems[0][0]]
        ratios = [median_ratio(rs, outlast_rounds) for rs in results.values()]

    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    print(
        f"\n{when}, {os.cpu_count()} cores, Python {sys.version.split()[0]}, "
        f"{args.runs} runs x {args.ops} ops, outlast concurrency {cfg.concurrency}, "
        f"{cfg.processes} worker process(es), tool {cfg.tool}, median of {args.repeat}, "
        f"bench took {time.perf_counter() - started:.0f}s, load average {load_before:.1f} before and "
        f"{os.getloadavg()[0]:.1f} after (others' work on the machine skews absolute numbers)\n"
        f"{outlast_source()}\n"
    )
    print(table(final, ratios))
    enq = [f"{r.name} {r.runs / r.enqueue_seconds:,.0f}/s" for r in final if r.enqueue_seconds]
    print("\nenqueue rate (not in the table): " + "; ".join(enq))
    print(f"outlast shared commits / 1 write per commit = {1 / ratios[1]:.1f}x")
    for r in final[:2]:
        if r.writer_busy is not None and r.commits and r.writes:
            print(
                f"{r.name}: the writer spent {1000 * r.writer_busy / r.commits:.2f} ms per commit, "
                f"{1000 * r.writer_busy / r.writes:.2f} ms per write"
            )


if __name__ == "__main__":
    main()
