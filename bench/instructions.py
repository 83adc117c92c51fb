"""Instructions per operation: a cost that the machine's load does not move. One `outlast worker`
process drains R runs of K operations under valgrind's callgrind. The instructions it executes
from the moment the runs are enqueued until they are all final, divided by the operations, are
the cost of one operation, its share of the run's fixed cost included. For the same code, Python
and servers the count repeats to about 1% (how the runs happen to share commits varies a little),
whatever else the machine is doing: CPU seconds (perf-smoke, bench/run.py) move by 15% on a busy
machine. It counts user-space instructions only: the kernel's work (socket sends, wake-ups) is
not in it.

    PYTHONPATH=. python3 bench/instructions.py [--runs 200] [--k 5] [--tool bump_sync|bump|bump_read]

The worker runs many times slower under callgrind: 200 5-op runs take about 15 s here. For the
code before a change, put that tree first on PYTHONPATH instead of ``.`` (``git archive BASE``
unpacked somewhere; as bench/statements.py): the worker process is given the same PYTHONPATH.
Needs valgrind (Debian's package of that name).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg
from common import Config, drop_schema
from outlast_runs import check_steps, enqueue_all, fresh, settings, wait_final

HERE = Path(__file__).resolve().parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument(
        "--tool", default="bump_sync", help="bump_sync (sync idempotent), bump (async) or bump_read"
    )
    ap.add_argument("--concurrency", type=int, default=32)
    a = ap.parse_args()
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise SystemExit("bench/instructions.py needs valgrind: apt-get install valgrind")
    db = os.environ.get("OUTLAST_BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
    redis = os.environ.get("OUTLAST_BENCH_REDIS_URL", "redis://127.0.0.1:6379/14")
    s = settings(Config(db, redis, a.runs, concurrency=a.concurrency, tool=a.tool))
    name = s.worker_name or "bench"  # settings() names every bench worker
    fresh(s)
    out = Path(tempfile.mkdtemp(prefix="outlast-callgrind-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("OUTLAST_")}
    env.update(
        OUTLAST_DATABASE_URL=db,
        OUTLAST_REDIS_URL=redis,
        OUTLAST_SCHEMA=s.schema,
        OUTLAST_PREFIX=s.prefix,
        OUTLAST_WORKER_NAME=name,
        OUTLAST_LOG_FORMAT="json",
        PYTHONPATH=os.pathsep.join(p for p in (env.get("PYTHONPATH"), str(HERE)) if p),
    )
    log = out / "worker.log"
    with open(log, "wb") as stderr:
        worker = subprocess.Popen(
            [
                "valgrind",
                "--tool=callgrind",
                "--instr-atstart=no",  # the start-up runs uncounted (and faster)
                f"--callgrind-out-file={out / 'callgrind.out'}",
                sys.executable,
                "-m",
                "outlast",
                "worker",
                "workload:app",
                "-c",
                str(a.concurrency),
            ],
            env=env,
            cwd=HERE,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    try:
        up(db, s.schema, name, worker)
        control("-i", "on", worker.pid)
        asyncio.run(enqueue_all(s, "steps", [{"k": a.k, "tool": a.tool}] * a.runs))
        asyncio.run(wait_final(s, a.runs, timeout=1800))
        control("-i", "off", worker.pid)
        worker.terminate()
        worker.wait(120)
        if a.tool != "bump_read":  # a read journals its result only
            check_steps(s, a.runs, a.k)
        total = instructions(out / "callgrind.out")
    except BaseException:
        print(f"the worker's log: {log}", file=sys.stderr)
        raise
    finally:
        if worker.poll() is None:
            worker.kill()
        drop_schema(db, s.schema)
    ops = a.runs * a.k
    print(
        f"{a.k}-op runs, tool {a.tool}, -c {a.concurrency}, {a.runs} runs: "
        f"{total / ops / 1000:.0f}k instructions per operation ({total:,} in all)"
    )
    shutil.rmtree(out, ignore_errors=True)


def up(url: str, schema: str, name: str, worker: subprocess.Popen[bytes]) -> None:
    """Wait for the worker's first heartbeat record (valgrind makes its start-up slow)."""
    until = time.monotonic() + 300
    with psycopg.connect(url, autocommit=True, options=f"-c search_path={schema}") as c:
        while (c.execute("SELECT count(*) FROM workers WHERE name = %s", (name,)).fetchone() or (0,))[0] == 0:
            if worker.poll() is not None:
                raise SystemExit(f"the worker exited (rc {worker.returncode}) before its first heartbeat")
            if time.monotonic() > until:
                raise SystemExit("the worker did not beat within 300 s")
            time.sleep(0.2)


def control(*args: object) -> None:
    subprocess.run(["callgrind_control", *map(str, args)], check=True, capture_output=True)


def instructions(path: Path) -> int:
    """The instructions counted: the 'totals' line of callgrind's output (its 'summary' line
    counts only what was collected before the last zeroing, 0 with instrumentation toggled)."""
    text = path.read_text(errors="replace")
    found = re.search(r"^totals: (\d+)", text, re.M)
    if found is None:
        raise SystemExit(f"no instruction count in {path}")
    return int(found.group(1))


if __name__ == "__main__":
    main()
