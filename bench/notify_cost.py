"""What the events trigger's NOTIFY (migration 0009) costs the writer, two ways.

- Runs (default): 5-operation runs through one in-process worker, with the trigger dropped, as
  migrated, and with 20 clients waiting (LISTEN and a watcher's row) on other runs or on runs of
  the workload; interleaved rounds, the median of each round's ratio to "no trigger". On a
  loaded 2-core machine its noise is +-30 %.
- ``--commits``: the cost at its source, precise enough for a few percent: transactions shaped
  like one of the writer's shared commits (15 journal-like updates of runs and one event insert,
  as a finish writes, pipelined), on a schema per variant, alternating in blocks; wall time and
  the serving backend's CPU per commit.

    python bench/notify_cost.py [--rounds 5] [--runs 800]
    python bench/notify_cost.py --commits [--rounds 40]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import random
import statistics
import time

import psycopg
from common import DEFAULT_DB, Config, drop_schema, pid_cpu, private_redis, tag
from outlast_runs import fresh, in_process, migrate, settings

from outlast._logs import configure
from outlast.settings import Settings
from outlast.store.notify import channel

VARIANTS = ("no trigger", "trigger", "trigger, 20 waiting elsewhere", "trigger, 20 waiting here")
LISTENERS = 20  # a shared server: max_connections is 100
APPEND = "UPDATE runs SET journal_len = journal_len + 1, updated_at = now() WHERE id = %s"
Conn = psycopg.Connection[tuple[object, ...]]


def prepare(url: str, schema: str, variant: str, runs: list[str]) -> list[Conn]:
    """Make the schema's variant: drop the trigger, or open 20 listening connections, each the
    registered watcher of a run of the workload (here) or of another one (elsewhere)."""
    if variant == "no trigger":
        with psycopg.connect(url, autocommit=True, options=f"-c search_path={schema}") as c:
            c.execute("DROP TRIGGER events_notify ON events")
    if "waiting" not in variant:
        return []
    listeners = []
    for i in range(LISTENERS):
        run_id = runs[i * (len(runs) // LISTENERS)] if variant.endswith("here") else f"elsewhere-{i}"
        conn = psycopg.connect(url, autocommit=True, options=f"-c search_path={schema}")
        conn.execute(f'LISTEN "{channel(schema, run_id)}"'.encode())
        conn.execute("INSERT INTO watchers (run_id, pid) VALUES (%s, pg_backend_pid())", (run_id,))
        listeners.append(conn)
    return listeners


async def one(s: Settings, variant: str, runs: int) -> float:
    """Runs per second for one variant on a fresh schema."""
    assert s.database_url
    ids = [f"r{i}" for i in range(runs)]
    await enqueue_all_ids(s, ids)
    listeners = prepare(s.database_url, s.schema, variant, ids)
    try:
        seconds, _cpu, _busy, _store = await in_process(s, runs, "shared", 16)
    finally:
        for conn in listeners:
            conn.close()
    return runs / seconds


async def enqueue_all_ids(s: Settings, ids: list[str]) -> None:
    from outlast import AsyncClient

    async with AsyncClient(settings=s) as client:
        for i in range(0, len(ids), 100):
            chunk = ids[i : i + 100]
            await client.enqueue_many("steps", [{"k": 5}] * len(chunk), run_ids=chunk)


def commit_cost(url: str, rounds: int, per_block: int = 200) -> None:
    runs = [f"r{i}" for i in range(1000)]
    conns: dict[str, Conn] = {}
    listeners: list[Conn] = []
    schemas: list[str] = []  # each dropped at the end, even one whose set-up failed
    wall: dict[str, list[float]] = {v: [] for v in VARIANTS}
    cpu = dict.fromkeys(wall, 0.0)
    try:
        for variant in VARIANTS:
            schema = f"bench_{tag()}"
            schemas.append(schema)
            asyncio.run(migrate(Settings(database_url=url, schema=schema)))
            conn = psycopg.connect(url, autocommit=True, options=f"-c search_path={schema}")
            conn.execute(
                "INSERT INTO runs (id, workflow, input, input_hash)"
                " SELECT unnest(%s::text[]), 'w', '{}', 'h'",
                (runs,),
            )
            conns[variant] = conn
            listeners += prepare(url, schema, variant, runs)
        for _ in range(rounds):
            for variant in random.sample(VARIANTS, len(VARIANTS)):
                conn = conns[variant]
                pid = conn.info.backend_pid
                c, t = pid_cpu(pid), time.perf_counter()
                for i in range(per_block):
                    with conn.pipeline(), conn.transaction():
                        for k in range(15):
                            conn.execute(APPEND, (runs[(i * 15 + k) % 1000],))
                        conn.execute(
                            "INSERT INTO events (run_id, kind) VALUES (%s, 'succeeded')", (runs[i % 1000],)
                        )
                wall[variant].append((time.perf_counter() - t) / per_block)
                cpu[variant] += pid_cpu(pid) - c
    finally:
        for conn in listeners:
            conn.close()
        for conn in conns.values():
            conn.close()
        for schema in schemas:
            drop_schema(url, schema)
    n = rounds * per_block
    for variant in VARIANTS:
        ratios = [a / b for a, b in zip(wall[variant], wall["no trigger"], strict=True)]
        print(
            f"{variant:<30} per commit: wall median {statistics.median(wall[variant]) * 1e6:5.0f} us,"
            f" {statistics.median(ratios):.3f}x no trigger's (median of paired blocks);"
            f" backend CPU {cpu[variant] / n * 1e6:4.0f} us"
        )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--runs", type=int, default=800)
    p.add_argument("--database-url", default=DEFAULT_DB)
    p.add_argument("--commits", action="store_true", help="measure the commits alone (see above)")
    a = p.parse_args()
    configure("json", logging.WARNING)
    if a.commits:
        commit_cost(a.database_url, a.rounds)
        return
    rates: dict[str, list[float]] = {v: [] for v in VARIANTS}
    with private_redis() as redis_url:
        cfg = Config(a.database_url, redis_url, a.runs)
        for r in range(a.rounds):
            for variant in random.sample(VARIANTS, len(VARIANTS)):
                s = settings(cfg)
                fresh(s)
                try:
                    rates[variant].append(asyncio.run(one(s, variant, a.runs)))
                finally:
                    drop_schema(cfg.database_url, s.schema)
            print(f"round {r + 1}: " + ", ".join(f"{v} {rates[v][-1]:.0f} runs/s" for v in VARIANTS))
    base = rates["no trigger"]
    for v in VARIANTS:
        ratios = [x / b for x, b in zip(rates[v], base, strict=True)]
        print(
            f"{v:<20} median {statistics.median(rates[v]):6.0f} runs/s;"
            f" vs no trigger: median {statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f})"
        )


if __name__ == "__main__":
    main()
