"""The cost budget: what one operation costs the worker and the Postgres backends serving it, and
what a run asks of Postgres (statements, commits).

Each measurement: N runs of K operations of one kind of tool (sync idempotent, run in a thread;
async idempotent; read) enqueued in a database of the measurement's own, then one outlast worker
process (as ``outlast worker`` runs it, concurrency from ``--concurrency``) drains them. Measured
from the worker's start to the last run final:

- worker CPU: user+sys of the worker process, from its own ``os.times()``;
- backend CPU: user+sys of the Postgres server processes serving the worker, read from
  ``/proc/<pid>/stat`` (the bench must run on Postgres's host): the backends whose
  ``application_name`` is the worker's (``PGAPPNAME``), each from when it was first seen (new
  ones from zero) to the drain's end, polled every 20 ms. Postgres's own background processes
  (WAL writer, checkpointer, autovacuum) are not counted;
- commits: ``pg_stat_database.xact_commit`` of the measurement's database, read after the worker
  stopped and its backends flushed their counts, less the bench's own polls;
- statements: the worker's own counts, the writer's writes plus the store's read round trips
  (pg_stat_statements, which would count them in the server, is only there when preloaded).
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass, replace
from typing import Any

import outlast_runs
import psycopg
from common import Config, pid_cpu, scratch_database, tag

FINAL = "SELECT count(*) FROM runs WHERE state NOT IN ('queued', 'running', 'waiting')"
TOOLS = {"sync": "bump_sync", "async": "bump", "read": "bump_read"}


@dataclass
class Cost:
    tool: str
    k: int
    runs: int
    seconds: float
    worker_cpu: float  # seconds
    backend_cpu: float  # seconds
    backends: int
    commits: int
    writes: int  # statements through the writer
    reads: int  # read round trips (pooled connections)
    writer_commits: int

    @property
    def ops(self) -> int:
        return self.runs * self.k

    def row(self) -> dict[str, Any]:
        per_run = self.runs or 1
        return {
            "tool": self.tool,
            "K": self.k,
            "runs/s": self.runs / self.seconds,
            "worker CPU us/op": self.worker_cpu / self.ops * 1e6,
            "Postgres backend CPU us/op": self.backend_cpu / self.ops * 1e6,
            "backends": self.backends,
            "statements/run": (self.writes + self.reads) / per_run,
            "writes/run": self.writes / per_run,
            "reads/run": self.reads / per_run,
            "commits/run": self.commits / per_run,
            "writer commits/run": self.writer_commits / per_run,
        }


def _db_name(url: str) -> str:
    with psycopg.connect(url) as c:
        row = c.execute("SELECT current_database()").fetchone()
    assert row is not None
    return str(row[0])


def _commits(admin: psycopg.Connection[Any], db: str) -> int:
    admin.execute("SELECT pg_stat_clear_snapshot()")
    row = admin.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = %s", (db,)).fetchone()
    return int(row[0]) if row else 0


def _quiet(
    admin: psycopg.Connection[Any], db: str, keep: list[int], app: str = "", timeout: float = 30.0
) -> None:
    """Wait until no backend of ``db`` is left but ``keep`` and those named ``app``: each one gone
    flushed its counts to pg_stat_database."""
    until = time.monotonic() + timeout
    q = (
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE datname = %s AND pid <> ALL(%s) AND application_name IS DISTINCT FROM %s"
    )
    while time.monotonic() < until:
        row = admin.execute(q, (db, keep, app)).fetchone()
        if row and row[0] == 0:
            return
        time.sleep(0.05)


def _backends(admin: psycopg.Connection[Any], app: str) -> list[int]:
    rows = admin.execute("SELECT pid FROM pg_stat_activity WHERE application_name = %s", (app,)).fetchall()
    return [int(r[0]) for r in rows]


def measure(cfg: Config, tool: str, k: int) -> Cost:
    """One drain of ``cfg.runs`` runs of K operations of ``tool`` (sync, async, read)."""
    with scratch_database(cfg.database_url, "bench_cost") as url:
        db = _db_name(url)
        s = outlast_runs.settings(replace(cfg, database_url=url))
        outlast_runs.fresh(s)
        asyncio.run(outlast_runs.enqueue_all(s, "steps", [{"k": k, "tool": TOOLS[tool]}] * cfg.runs))
        app = f"bench-cost-{tag()}"
        # the admin connection is on another database: its own transactions are not counted
        with (
            psycopg.connect(cfg.database_url, autocommit=True) as admin,
            psycopg.connect(url, autocommit=True, options=f"-c search_path={s.schema}") as poll,
        ):
            was = os.environ.get("PGAPPNAME")
            os.environ["PGAPPNAME"] = app  # the spawned worker's connections carry it
            try:
                workers = outlast_runs.Workers(s, 1)
            finally:
                if was is None:
                    del os.environ["PGAPPNAME"]
                else:
                    os.environ["PGAPPNAME"] = was
            assert workers.go is not None
            _quiet(admin, db, [poll.info.backend_pid], app)  # the enqueueing client's are gone
            before = _commits(admin, db)
            polls = 0
            start: dict[int, float] = {pid: pid_cpu(pid) for pid in _backends(admin, app)}
            last = dict(start)
            t0 = time.perf_counter()
            workers.go.set()
            done = 0
            while done < cfg.runs:
                time.sleep(0.02)
                polls += 1
                row = poll.execute(FINAL).fetchone()
                done = int(row[0]) if row else 0
                for pid in _backends(admin, app):
                    try:
                        last[pid] = pid_cpu(pid)
                    except FileNotFoundError:  # gone since: its last reading stands
                        pass
                if time.perf_counter() - t0 > 600:
                    raise SystemExit(f"cost: only {done} of {cfg.runs} runs final after 600 s")
            seconds = time.perf_counter() - t0
            backend_cpu = sum(v - start.get(pid, 0.0) for pid, v in last.items())
            (cpu, commits_w, writes, _busy, reads) = workers.finish()[0]
        with psycopg.connect(cfg.database_url, autocommit=True) as admin:
            _quiet(admin, db, [])
            commits = _commits(admin, db) - before - polls
        outlast_runs.check_steps(s, cfg.runs, k, journaled=tool != "read")
    return Cost(tool, k, cfg.runs, seconds, cpu, backend_cpu, len(last), commits, writes, reads, commits_w)


def run(cfg: Config, rounds: int) -> list[dict[str, Any]]:
    """Every (tool, K) once per round, interleaved; each row's values over the rounds."""
    out: list[dict[str, Any]] = []
    for i in range(rounds):
        for tool in TOOLS:
            for k in (1, 5):
                t = time.perf_counter()
                out.append(measure(cfg, tool, k).row() | {"round": i + 1})
                print(f"  [{i + 1}/{rounds}] cost {tool} K={k}: {time.perf_counter() - t:.1f}s", flush=True)
    return out


COLUMNS = (
    ("runs/s", ".0f"),
    ("worker CPU us/op", ".0f"),
    ("Postgres backend CPU us/op", ".0f"),
    ("statements/run", ".1f"),
    ("writes/run", ".1f"),
    ("reads/run", ".1f"),
    ("commits/run", ".1f"),
    ("writer commits/run", ".2f"),
)


def table(rows: list[dict[str, Any]]) -> str:
    """The median of each (tool, K) over its rounds, and the spread (min-max) of the two CPU costs."""
    lines = [
        "| tool | K | " + " | ".join(name for name, _ in COLUMNS) + " |",
        "|---|--:|" + "--:|" * len(COLUMNS),
    ]
    for tool in TOOLS:
        for k in (1, 5):
            mine = [r for r in rows if r["tool"] == tool and r["K"] == k]
            if not mine:
                continue
            cells = []
            for name, spec in COLUMNS:
                values = sorted(r[name] for r in mine)
                cell = f"{values[len(values) // 2]:{spec}}"
                if "CPU" in name and len(values) > 1:
                    cell += f" ({values[0]:{spec}}-{values[-1]:{spec}})"
                cells.append(cell)
            lines.append(f"| {tool} | {k} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
