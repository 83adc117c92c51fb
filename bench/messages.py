"""A message's round trip at light load: from ``send`` called to the workflow holding the message
(``run.receive`` returned), one message at a time, each run waiting (no worker held) when its
next message is sent. Printed as p50 and p99, from ``send`` called and from ``send`` returned,
beside how long ``send`` itself took.

    OUTLAST_DATABASE_URL=... OUTLAST_REDIS_URL=... PYTHONPATH=. python3 bench/messages.py --runs 10 --turns 20

One worker in this process (``outlast.testing``'s in-process worker), on a schema and key prefix of
its own, dropped at the end. Indicative only: the figure is the machine's as much as outlast's
(what else runs on it, the servers' fsync), and a wake-up replays the run's journal, which grows
with its turns.
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
from typing import Any

from outlast import App
from outlast.testing import Harness

app = App()
held: dict[str, float] = {}  # message id -> when the workflow first held it (perf_counter)
arrived = threading.Condition()


@app.workflow("turns")
async def turns(run: Any, n: int) -> int:
    for _ in range(n):
        message = await run.receive("in")
        with arrived:
            held.setdefault(message["id"], time.perf_counter())  # a replay's return is not counted
            arrived.notify_all()
    return n


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--turns", type=int, default=20)
    a = ap.parse_args()
    db = os.environ.get("OUTLAST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")
    rd = os.environ.get("OUTLAST_REDIS_URL", "redis://127.0.0.1:6379/0")
    h = Harness.create(app, db, rd, sweep_interval=1.0, receive_linger=0.0)  # as measured: no linger
    try:
        h.start_worker()
        trips, sends, after = [], [], []
        for r in range(a.runs):
            run = h.client.enqueue("turns", {"n": a.turns})
            for k in range(a.turns):
                h.wait(run.id, "waiting")  # light load: the run waits, no worker holds it
                mid = f"{r}-{k}"
                began = time.perf_counter()
                h.send(run.id, "in", {"id": mid})
                sent = time.perf_counter()
                with arrived:
                    arrived.wait_for(lambda mid=mid: mid in held, timeout=30)
                trips.append((held[mid] - began) * 1000)
                after.append((held[mid] - sent) * 1000)
                sends.append((sent - began) * 1000)
            h.wait(run.id)
        load = os.getloadavg()[0]
        print(f"{len(trips)} messages ({a.runs} runs x {a.turns} turns), load average {load:.1f}")
        print(f"send -> workflow holds it: p50 {pct(trips, 0.5):.1f} ms, p99 {pct(trips, 0.99):.1f} ms")
        print(f"send returns -> held:      p50 {pct(after, 0.5):.1f} ms, p99 {pct(after, 0.99):.1f} ms")
        print(f"send() itself:             p50 {pct(sends, 0.5):.1f} ms, p99 {pct(sends, 0.99):.1f} ms")
        print(f"mean round trip {statistics.mean(trips):.1f} ms")
    finally:
        h.close()


if __name__ == "__main__":
    main()
