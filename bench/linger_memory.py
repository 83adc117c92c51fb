"""What a lingering receive costs in memory: N runs, each lingering at a ``receive`` in one
in-process worker (``OUTLAST_RECEIVE_LINGER=60``), and the process's RSS before and after.

    OUTLAST_DATABASE_URL=... OUTLAST_REDIS_URL=... PYTHONPATH=. python3 bench/linger_memory.py 80

A run's journal here is one entry: a long conversation's run also keeps its loaded journal, as
any run its worker holds does. Indicative only. Not a test: nothing asserts a bound.
"""

from __future__ import annotations

import argparse
import logging
import os
import time
from typing import Any

from outlast import App
from outlast._logs import configure
from outlast.testing import Harness

app = App()


@app.workflow("talk")
async def talk(run: Any) -> Any:
    return await run.receive("user")


def rss_kb() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def lingering(h: Harness) -> int:
    return int(h.sql("SELECT count(DISTINCT run_id) FROM watchers")[0][0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", type=int, nargs="?", default=80)
    a = ap.parse_args()
    db = os.environ.get("OUTLAST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")
    rd = os.environ.get("OUTLAST_REDIS_URL", "redis://127.0.0.1:6379/0")
    configure(level=logging.WARNING)
    h = Harness.create(app, db, rd, concurrency=a.runs + 10, receive_linger=60.0)
    try:
        h.start_worker()
        warm = h.client.enqueue("talk", {})  # the worker and its listening connection warmed up
        while lingering(h) < 1:
            time.sleep(0.05)
        h.send(warm.id, "user", 0)
        h.wait(warm.id, timeout=60)
        time.sleep(0.5)
        before, began = rss_kb(), time.monotonic()
        ids = [h.client.enqueue("talk", {}).id for _ in range(a.runs)]
        while lingering(h) < a.runs:
            if time.monotonic() - began > 50:
                raise SystemExit(f"only {lingering(h)} of {a.runs} runs lingering after 50 s")
            time.sleep(0.1)
        settled = time.monotonic() - began
        time.sleep(0.5)
        after = rss_kb()
        print(
            f"{a.runs} runs lingering after {settled:.1f} s: RSS {before} -> {after} KB, "
            f"{(after - before) / a.runs:.1f} KB a run; load average {os.getloadavg()[0]:.1f}"
        )
        for run_id in ids:
            h.send(run_id, "user", 1)
        for run_id in ids:
            h.wait(run_id, timeout=60)
    finally:
        h.close()


if __name__ == "__main__":
    main()
