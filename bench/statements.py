"""Statements and commits per run: R runs of K operations served one at a time (concurrency 1: no
commit is shared between runs) by one worker in this process. Prints the writer's statements and
commits, and the pooled reads, per run: what one run costs Postgres, before and after a change.

    PYTHONPATH=. python3 bench/statements.py [--runs 200] [--k 5] [--tool bump_sync|look]

(``OUTLAST_BENCH_DATABASE_URL`` / ``OUTLAST_BENCH_REDIS_URL``, as bench/run.py.) For the code before
a change, put that tree first on PYTHONPATH: this script and bench/ stay the same.
"""

from __future__ import annotations

import argparse
import asyncio
import os

from common import Config, drop_schema
from outlast_runs import check_steps, enqueue_all, fresh, in_process, settings


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--tool", default="bump_sync", help="bump_sync (idempotent, sync) or look (a read)")
    ap.add_argument("--concurrency", type=int, default=1, help="runs at once (1: no commit shared)")
    a = ap.parse_args()
    db = os.environ.get("OUTLAST_BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
    redis = os.environ.get("OUTLAST_BENCH_REDIS_URL", "redis://127.0.0.1:6379/14")
    s = settings(Config(db, redis, a.runs, concurrency=a.concurrency, tool=a.tool))
    fresh(s)
    try:
        asyncio.run(enqueue_all(s, "steps", [{"k": a.k, "tool": a.tool}] * a.runs))
        _seconds, _cpu, _busy, store = asyncio.run(in_process(s, a.runs, "shared", 16))
        if a.tool != "look":  # a read journals its result only
            check_steps(s, a.runs, a.k)
    finally:
        drop_schema(db, s.schema)
    w = store.writer
    print(
        f"{a.k}-op runs, tool {a.tool}, -c {a.concurrency}: {w.writes / a.runs:.2f} statements and "
        f"{w.commits / a.runs:.2f} commits per run through the writer, "
        f"{store.reads / a.runs:.2f} pooled reads per run"
    )


if __name__ == "__main__":
    main()
