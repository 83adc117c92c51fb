"""The Celery peer: the same K steps as one task, ``acks_late`` (acknowledged after it ran), the
broker the bench's private Redis (``BENCH_CELERY_BROKER``), no result backend. Each task counts
itself in Redis and the first and the last note the time, so the clock excludes worker start-up."""

from __future__ import annotations

import os
import time

import redis
from celery import Celery
from workload import rq_steps

BROKER = os.environ.get("BENCH_CELERY_BROKER", "redis://127.0.0.1:6379/15")

app = Celery("bench", broker=BROKER)
app.conf.update(
    task_acks_late=True,
    task_ignore_result=True,
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
    task_default_queue="bench",
)
_r: redis.Redis | None = None


@app.task(name="bench.steps")
def steps(k: int, total: int) -> int:
    global _r
    if _r is None:
        _r = redis.Redis.from_url(BROKER)
    x = rq_steps(k)
    n = _r.incr("bench:done")
    if n == 1:
        _r.set("bench:first", time.time())
    if n == total:
        _r.set("bench:last", time.time())
    return x


@app.task(name="bench.stamp")
def stamp(sent: float) -> None:
    """The latency probe's task: notes how long after ``sent`` it started."""
    global _r
    started = time.time()
    if _r is None:
        _r = redis.Redis.from_url(BROKER)
    _r.rpush("bench:lat", started - sent)
