"""The DBOS peer, run as a child process (DBOS is one per process):
``python dbos_peer.py URL N K CONCURRENCY``. Launches DBOS on URL, enqueues N workflows of K steps
on a queue polled every 10 ms with CONCURRENCY per worker, waits for all; prints JSON."""

from __future__ import annotations

import json
import sys
import time

from common import host_cpu, proc_cpu
from dbos import DBOS

url, n, k, concurrency = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
DBOS(config={"name": "bench", "system_database_url": url, "log_level": "WARNING"})


@DBOS.step()
def bump(x: int) -> int:
    return x + 1


@DBOS.workflow()
def steps(k: int) -> int:
    x = 0
    for _ in range(k):
        x = bump(x)
    return x


if __name__ == "__main__":
    DBOS.launch()
    queue = DBOS.register_queue("bench", worker_concurrency=concurrency, polling_interval_sec=0.01)
    with host_cpu() as busy:
        cpu = proc_cpu()
        t0 = time.perf_counter()
        handles = [queue.enqueue(steps, k) for _ in range(n)]
        results = [h.get_result() for h in handles]
        seconds = time.perf_counter() - t0
        cpu = proc_cpu() - cpu
    assert results == [k] * n, "DBOS: wrong results"
    DBOS.destroy()
    print(json.dumps({"seconds": seconds, "cpu": cpu, "host": busy[0]}))
