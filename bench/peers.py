"""The peers, each doing the same K trivial steps per job in memory (no per-step durability):
RQ (SimpleWorker, or the forking Worker), Celery (Redis broker, ``acks_late``, prefork ``-c N``)
and DBOS (queued workflows of K steps on Postgres, which checkpoints every step)."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import time
from collections.abc import Callable
from multiprocessing.synchronize import Event as MpEvent
from pathlib import Path
from typing import Any

import redis
import workload
from common import Config, Result, flush_redis, host_cpu, percentile, pid_cpu, proc_cpu, scratch_database

HERE = Path(__file__).resolve().parent


def _rq() -> Any:
    """rq, imported on use: the outlast worker processes the bench spawns import this module (as
    part of bench/run.py), and rq at its top would count in their memory."""
    try:
        import rq
    except ImportError:  # pragma: no cover - the bench extra installs it
        raise RuntimeError("rq is not installed (pip install -e '.[bench]')") from None
    return rq


def _child_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH", "")]))
    env.update(extra)
    return env


# -- RQ ----------------------------------------------------------------------------------------


def rq_worker_process(redis_url: str, ready: Any, go: MpEvent, out: Any) -> None:
    rq = _rq()
    conn = redis.Redis.from_url(redis_url)
    w = rq.SimpleWorker([rq.Queue("bench", connection=conn)], connection=conn)
    ready.put(os.getpid())
    go.wait()
    cpu = proc_cpu()
    w.work(burst=True, logging_level="WARNING")
    out.put(proc_cpu() - cpu)


def rq_measure(cfg: Config, k: int, processes: int = 1, fork: bool = False) -> Callable[[str], Result]:
    def run(name: str) -> Result:
        rq = _rq()
        flush_redis(cfg.redis_url)
        conn = redis.Redis.from_url(cfg.redis_url)
        q = rq.Queue("bench", connection=conn)
        jobs = [rq.Queue.prepare_data(workload.rq_steps, args=(k,), result_ttl=3600) for _ in range(cfg.runs)]
        q.enqueue_many(jobs)
        if processes <= 1:
            w = (rq.Worker if fork else rq.SimpleWorker)([q], connection=conn)
            with host_cpu() as busy:
                cpu = proc_cpu()
                t0 = time.perf_counter()
                w.work(burst=True, logging_level="WARNING")
                seconds = time.perf_counter() - t0
                cpu = proc_cpu() - cpu
        else:
            seconds, cpu, busy = _rq_processes(cfg, processes)
        done = q.finished_job_registry.count
        conn.close()
        if done != cfg.runs:
            raise RuntimeError(f"RQ: {done} of {cfg.runs} jobs finished")
        return Result(name, k, processes, cfg.runs, seconds, cpu, busy[0])

    return run


def _rq_processes(cfg: Config, processes: int) -> tuple[float, float, list[float]]:
    ctx = multiprocessing.get_context("spawn")
    ready, out = ctx.Queue(), ctx.Queue()
    go = ctx.Event()
    procs = [
        ctx.Process(target=rq_worker_process, args=(cfg.redis_url, ready, go, out)) for _ in range(processes)
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
    return seconds, sum(out.get(timeout=10) for _ in procs), busy


# -- Celery ------------------------------------------------------------------------------------


def celery_measure(cfg: Config, k: int, children: int = 1) -> Callable[[str], Result]:
    """N tasks enqueued first, then ``celery worker -c children``; the clock runs from the first
    task's end to the last one's (start-up excluded), so it covers N-1 tasks."""

    def run(name: str) -> Result:
        flush_redis(cfg.redis_url)
        env = _child_env(BENCH_CELERY_BROKER=cfg.redis_url)
        send = (
            "import sys; from celery_app import steps\n"
            "k, n = int(sys.argv[1]), int(sys.argv[2])\n"
            "with steps.app.producer_or_acquire() as p:\n"
            "    for _ in range(n): steps.apply_async((k, n), producer=p)\n"
        )
        subprocess.run([sys.executable, "-c", send, str(k), str(cfg.runs)], env=env, check=True, cwd=HERE)
        cmd = [sys.executable, "-m", "celery", "-A", "celery_app", "worker", "-c", str(children)]
        cmd += ["-P", "prefork", "-Q", "bench", "-l", "WARNING", "--without-gossip", "--without-mingle"]
        cmd += ["--without-heartbeat"]
        r = redis.Redis.from_url(cfg.redis_url)
        proc = subprocess.Popen(cmd, env=env, cwd=HERE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            _await_key(r, "bench:first", proc)  # the worker is up: CPU counts from here
            cpu = _tree_cpu(proc.pid)
            with host_cpu() as busy:
                _await_key(r, "bench:last", proc)
                cpu = _tree_cpu(proc.pid) - cpu
            first, last = float(r.get("bench:first") or 0), float(r.get("bench:last") or 0)
            done = int(r.get("bench:done") or 0)
        finally:
            proc.terminate()
            proc.wait(30)
            r.close()
        if done != cfg.runs:
            raise RuntimeError(f"Celery: {done} of {cfg.runs} tasks done")
        return Result(name, k, children, cfg.runs - 1, last - first, cpu, busy[0])

    return run


def _await_key(r: redis.Redis, key: str, proc: subprocess.Popen[bytes]) -> None:
    until = time.monotonic() + 300
    while r.get(key) is None:
        if proc.poll() is not None or time.monotonic() > until:
            raise RuntimeError(f"Celery: worker gone or too slow: {proc.stderr and proc.stderr.read()!r}")
        time.sleep(0.005)


def _tree_cpu(pid: int) -> float:
    """CPU seconds of a process and its live children (Celery's pool), since they started."""
    total = pid_cpu(pid)
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        children = []
    return total + sum(_tree_cpu(int(c)) for c in children)


# -- DBOS --------------------------------------------------------------------------------------


def dbos_measure(cfg: Config, k: int) -> Callable[[str], Result]:
    """N queued DBOS workflows of K steps in a child process on a database of its own."""

    def run(name: str) -> Result:
        with scratch_database(cfg.database_url, "bench_dbos") as url:
            out = subprocess.run(
                [
                    sys.executable,
                    str(HERE / "dbos_peer.py"),
                    url,
                    str(cfg.runs),
                    str(k),
                    str(cfg.concurrency),
                ],
                env=_child_env(),
                capture_output=True,
                text=True,
                timeout=600,
            )
        if out.returncode != 0:
            raise RuntimeError(f"DBOS: {out.stderr.strip().splitlines()[-1:]}")
        got = json.loads(out.stdout.strip().splitlines()[-1])
        return Result(name, k, 1, cfg.runs, got["seconds"], got["cpu"], got["host"])

    return run


# -- latency at light load (enqueue call, enqueue -> start), as outlast's probe measures it ------


def peer_latency(cfg: Config, peer: str, samples: int) -> dict[str, float]:
    """One job at a time, 20 ms apart, to an idle worker process (Celery ``-c 1`` or RQ's
    SimpleWorker); each job notes when it started."""
    flush_redis(cfg.redis_url)
    env = _child_env(BENCH_CELERY_BROKER=cfg.redis_url)
    r = redis.Redis.from_url(cfg.redis_url)
    if peer == "celery":
        from celery import Celery

        sender = Celery("bench-sender", broker=cfg.redis_url)
        cmd = [sys.executable, "-m", "celery", "-A", "celery_app", "worker", "-c", "1", "-P", "prefork"]
        cmd += ["-Q", "bench", "-l", "WARNING", "--without-gossip", "--without-mingle", "--without-heartbeat"]

        def send(sent: float) -> None:
            sender.send_task("bench.stamp", args=(sent,), queue="bench")
    else:
        q = _rq().Queue("bench", connection=r)
        cmd = [sys.executable, "-m", "rq.cli", "worker", "--url", cfg.redis_url, "-w", "rq.SimpleWorker"]
        cmd += ["-q", "bench"]

        def send(sent: float) -> None:
            q.enqueue(workload.peer_stamp, sent)

    proc = subprocess.Popen(cmd, env=env, cwd=HERE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        send(time.time())  # warm-up: the worker is up once it ran
        _await_len(r, 1, proc)
        time.sleep(0.3)
        r.delete("bench:lat")
        calls = []
        for _ in range(samples):
            before = time.time()
            send(before)
            calls.append(time.time() - before)
            time.sleep(0.02)
        _await_len(r, samples, proc)
        starts = [float(v) for v in r.lrange("bench:lat", 0, -1)]
    finally:
        proc.terminate()
        proc.wait(30)
        r.close()
    return {
        "enqueue call p50 ms": 1000 * percentile(calls, 0.5),
        "enqueue->start p50 ms": 1000 * percentile(starts, 0.5),
        "enqueue->start p99 ms": 1000 * percentile(starts, 0.99),
    }


def _await_len(r: redis.Redis, n: int, proc: subprocess.Popen[bytes]) -> None:
    until = time.monotonic() + 60
    while r.llen("bench:lat") < n:
        if proc.poll() is not None or time.monotonic() > until:
            raise RuntimeError(f"worker gone or too slow: {proc.stderr and proc.stderr.read()!r}")
        time.sleep(0.01)
