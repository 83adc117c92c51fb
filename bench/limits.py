"""The limits of the servers underneath, measured in the same run as outlast:
- a raw INSERT+COMMIT per step on one connection (the floor of "a commit per write");
- the fenced-append limit: outlast's own ``append`` statement (fencing token, chain head, journal
  row) from a raw psycopg loop on one connection, B appends per transaction sent in pipeline mode
  as outlast's writer sends them, B = the writes per commit outlast reached in the same round;
- Redis: XADD round trips on one connection (what enqueueing a run costs Redis, unpipelined)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
import redis
from common import Config, Result, drop_schema, host_cpu, proc_cpu, tag
from outlast_runs import migrate, settings
from psycopg import sql

from outlast.store.queries import Q


def raw_insert(cfg: Config, k: int) -> Callable[[str], Result]:
    def run(name: str) -> Result:
        schema = f"bench_raw_{tag()}"
        try:
            with psycopg.connect(cfg.database_url, autocommit=True) as c:
                c.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
                c.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
                c.execute("CREATE TABLE steps (run int, step int, x int, PRIMARY KEY (run, step))")
                with host_cpu() as busy:
                    cpu = proc_cpu()
                    t0 = time.perf_counter()
                    for r in range(cfg.runs):
                        for step in range(k):
                            c.execute("INSERT INTO steps VALUES (%s, %s, %s)", (r, step, step + 1))
                    seconds = time.perf_counter() - t0
                    cpu = proc_cpu() - cpu
        finally:
            drop_schema(cfg.database_url, schema)
        n = cfg.runs * k
        return Result(name, k, 1, cfg.runs, seconds, cpu, busy[0], commits=n, writes=n)

    return run


def fenced_append(
    cfg: Config, batch: Callable[[], int], appends: int, connections: int = 1
) -> Callable[[str], Result]:
    """``appends`` fenced appends, ``batch()`` per transaction (one per run, like concurrent
    runs), reported as writes: compare with outlast's writes/s, not its ops/s. With
    ``connections`` above 1, that many transactions in flight at once (a thread and a connection
    each, over runs of their own), as the writer's lanes (``OUTLAST_WRITER_IN_FLIGHT``)."""

    def run(name: str) -> Result:
        b = max(1, batch())
        s = settings(cfg)
        asyncio.run(migrate(s))
        # as outlast's writer: generic plans (see Store._connect)
        options = f"-c search_path={s.schema} -c plan_cache_mode=force_generic_plan"
        rounds = max(1, appends // (b * connections))
        try:
            with psycopg.connect(cfg.database_url, autocommit=True, options=options) as c:
                c.execute(
                    "INSERT INTO runs (id, workflow, input, input_hash, state, fencing_token) "
                    "SELECT 'f' || k || '_' || i, 'steps', '{}', '', 'running', 1"
                    " FROM generate_series(1, %s) i, generate_series(1, %s) k",
                    (b, connections),
                )
                c.execute("ANALYZE runs")

            def lane(k: int) -> None:
                with psycopg.connect(cfg.database_url, autocommit=True, options=options) as c:
                    for seq in range(1, rounds + 1):
                        _append_batch(c, b, seq, f"f{k}_")

            with host_cpu() as busy:
                cpu = proc_cpu()
                t0 = time.perf_counter()
                with ThreadPoolExecutor(connections) as pool:
                    list(pool.map(lane, range(1, connections + 1)))
                seconds = time.perf_counter() - t0
                cpu = proc_cpu() - cpu
            with psycopg.connect(cfg.database_url, autocommit=True, options=options) as c:
                ok = c.execute("SELECT count(*) FROM journal").fetchone()
        finally:
            drop_schema(cfg.database_url, s.schema)
        n = rounds * b * connections
        if ok != (n,):
            raise RuntimeError(f"fenced append: {ok} rows, expected {n}")
        return Result(name, 1, 1, n, seconds, cpu, busy[0], commits=rounds * connections, writes=n)

    return run


def _append_batch(c: psycopg.Connection[Any], b: int, seq: int, prefix: str = "f1_") -> None:
    with c.pipeline(), c.transaction():
        curs = [
            c.execute(
                Q["append"],
                {
                    "run_id": f"{prefix}{i}",
                    "token": 1,
                    "seq": seq,
                    "hash": f"{i:08x}{seq:056x}",
                    # one entry per statement, as the worker's append of a single entry
                    "kinds": ["intention" if seq % 2 else "result"],
                    "op_ids": [f"op{seq // 2}"],
                    "bodies": [f'{{"args":{{"x":{seq}}},"tool":"bump"}}'],
                    "hashes": [f"{i:08x}{seq:056x}"],
                },
            )
            for i in range(1, b + 1)
        ]
    for cur in curs:
        if not cur.fetchall():
            raise RuntimeError("fenced append refused")


def redis_xadd(cfg: Config, n: int) -> Callable[[str], Result]:
    def run(name: str) -> Result:
        r = redis.Redis.from_url(cfg.redis_url)
        key = f"bench:limit:{tag()}"
        try:
            with host_cpu() as busy:
                cpu = proc_cpu()
                t0 = time.perf_counter()
                for i in range(n):
                    r.xadd(key, {"run": i})
                seconds = time.perf_counter() - t0
                cpu = proc_cpu() - cpu
        finally:
            r.delete(key)
            r.close()
        return Result(name, 1, 1, n, seconds, cpu, busy[0])

    return run
