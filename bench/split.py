"""Splits the host's CPU while outlast's worker processes drain five-operation runs: the workers,
the Postgres backends serving them (found by their client ports), Redis, the bench itself and the
rest of the machine; with each drain's runs/s, worker CPU per operation, per-operation p50 and
the connections the workers held. Cells are measured in interleaved rounds.

    python bench/split.py --processes 1 2 4 --rounds 3
    python bench/split.py --far 0.5 0 --concurrency 32 256 --in-flight 1 2 --processes 1
    python bench/split.py --memory --in-flight 1 2 3

``--far DELAY BACK`` puts ``bench/far.py`` between the workers and Postgres (its CPU is counted
apart). ``--memory`` measures each worker's RSS idle and holding 200 runs instead. The rest of the
machine includes Postgres's own background processes, shared with anything else it serves.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import psutil
import psycopg
from common import (
    DEFAULT_DB,
    Config,
    busy_ticks,
    drop_schema,
    free_port,
    percentile,
    pid_cpu,
    private_redis,
    rss_mb,
)
from outlast_runs import Workers, enqueue_all, fresh, settings, wait_final

HERE = Path(__file__).resolve().parent
K = 5


def ports_to(pids: list[int], port: int) -> set[int]:
    """The local ports of the processes' TCP connections to ``port``."""
    out = set()
    for pid in pids:
        for c in psutil.Process(pid).net_connections(kind="tcp"):
            if c.raddr and c.raddr.port == port:
                out.add(c.laddr.port)
    return out


def backends(url: str, ports: set[int]) -> list[int]:
    with psycopg.connect(url, autocommit=True) as c:
        rows = c.execute("SELECT pid, client_port FROM pg_stat_activity WHERE client_port > 0").fetchall()
    return [pid for pid, port in rows if port in ports]


def cpu_of(pids: list[int]) -> dict[int, float]:
    out = {}
    for pid in pids:
        try:
            out[pid] = pid_cpu(pid)
        except OSError:  # ended meanwhile
            pass
    return out


def redis_pid(url: str) -> int:
    port = url.rsplit(":", 1)[1].split("/")[0]
    for p in psutil.process_iter(["name", "cmdline"]):
        if p.info["name"] == "redis-server" and port in " ".join(p.info["cmdline"] or []):
            return int(p.pid)
    raise SystemExit(f"no redis-server on port {port}")


def drain(cfg: Config, processes: int, concurrency: int, in_flight: int, far: list[int]) -> dict[str, Any]:
    """One drain of ``cfg.runs`` timed runs; ``far``: the proxy's pid and port, if any."""
    direct = settings(cfg, concurrency=concurrency, writer_in_flight=in_flight)
    s = direct.with_(database_url=f"postgresql://postgres@127.0.0.1:{far[1]}/test") if far else direct
    fresh(direct)
    try:
        asyncio.run(enqueue_all(direct, "timed", [{"k": K}] * cfg.runs))
        workers = Workers(s, processes)
        assert workers.go is not None
        clients = [far[0]] if far else workers.pids
        pg = backends(cfg.database_url, ports_to(clients, 5432))
        redis = redis_pid(cfg.redis_url)
        parts = {"workers": workers.pids, "postgres": pg, "redis": [redis], "proxy": far[:1]}
        before = {name: cpu_of(pids) for name, pids in parts.items()}
        bench, host, t0 = os.times(), busy_ticks(), time.perf_counter()
        workers.go.set()
        asyncio.run(wait_final(direct, cfg.runs))
        seconds = time.perf_counter() - t0
        parts["postgres"] = backends(cfg.database_url, ports_to(clients, 5432))  # any opened since
        after = {name: cpu_of(pids) for name, pids in parts.items()}
        host_s = (busy_ticks() - host) / os.sysconf("SC_CLK_TCK")
        bench_s = sum(os.times()[:2]) - sum(bench[:2])
        workers.finish()
        with psycopg.connect(cfg.database_url, options=f"-c search_path={direct.schema}") as c:
            rows = c.execute("SELECT result FROM runs WHERE state = 'succeeded'").fetchall()
    finally:
        drop_schema(cfg.database_url, direct.schema)
    if len(rows) != cfg.runs:
        raise SystemExit(f"{len(rows)} of {cfg.runs} runs succeeded")
    split = {name: sum(v - before[name].get(pid, 0.0) for pid, v in after[name].items()) for name in parts}
    split["bench"] = bench_s
    split["rest"] = host_s - sum(split.values())
    per_op = [(r[0][1] - r[0][0]) / K for r in rows]
    return {
        "runs/s": cfg.runs / seconds,
        "worker CPU us/op": 1e6 * split["workers"] / (cfg.runs * K),
        "per-op p50 ms": 1000 * percentile(per_op, 0.5),
        "pg connections": len(parts["postgres"]),  # at the end: the lanes and renewals open late
        "host busy cores": host_s / seconds,
        **{f"{name} cores": v / seconds for name, v in split.items()},
    }


def memory(cfg: Config, in_flight: int, hold: float = 3.0, runs: int = 200) -> dict[str, Any]:
    s = settings(cfg, concurrency=runs, writer_in_flight=in_flight)
    fresh(s)
    workers = Workers(s, 1, gated=False)
    pid = workers.pids[0]
    try:
        time.sleep(1.0)
        idle = rss_mb(pid)
        conns = len(backends(cfg.database_url, ports_to([pid], 5432)))
        asyncio.run(enqueue_all(s, "hold", [{"seconds": hold}] * runs))
        peak, until = idle, time.monotonic() + hold + 30
        with psycopg.connect(cfg.database_url, autocommit=True, options=f"-c search_path={s.schema}") as c:
            while time.monotonic() < until:
                peak = max(peak, rss_mb(pid))
                conns = max(conns, len(backends(cfg.database_url, ports_to([pid], 5432))))
                done = c.execute("SELECT count(*) FROM runs WHERE state = 'succeeded'").fetchone()
                if done and done[0] >= runs:
                    break
                time.sleep(0.1)
        workers.finish()
    finally:
        drop_schema(cfg.database_url, s.schema)
    return {"RSS idle MB": idle, f"RSS holding {runs} runs MB": peak, "pg connections": conns}


def main() -> None:
    a = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    a.add_argument("--database-url", default=os.environ.get("OUTLAST_BENCH_DATABASE_URL", DEFAULT_DB))
    a.add_argument("--runs", type=int, default=800)
    a.add_argument("--rounds", type=int, default=3)
    a.add_argument("--processes", type=int, nargs="+", default=[1])
    a.add_argument("--concurrency", type=int, nargs="+", default=[32])
    a.add_argument("--in-flight", type=int, nargs="+", default=[1])
    a.add_argument("--far", type=float, nargs=2, metavar=("DELAY_MS", "BACK_MS"))
    a.add_argument("--memory", action="store_true")
    a.add_argument("--out", type=Path, help="append every sample to this JSON-lines file")
    args = a.parse_args()
    with private_redis() as redis_url:
        cfg = Config(args.database_url, redis_url, args.runs)
        far: list[int] = []
        proxy = None
        if args.far:
            port = free_port()
            cmd = [sys.executable, str(HERE / "far.py"), str(port), "127.0.0.1:5432", *map(str, args.far)]
            proxy = subprocess.Popen(cmd)
            far = [proxy.pid, port]
            time.sleep(1.0)
        try:
            cells = list(itertools.product(args.processes, args.concurrency, args.in_flight))
            for i in range(args.rounds):
                for p, c, n in cells:
                    key = {"round": i + 1, "processes": p, "concurrency": c, "in_flight": n, "far": args.far}
                    got = memory(cfg, n) if args.memory else drain(cfg, p, c, n, far)
                    line = json.dumps(key | {k: round(v, 3) for k, v in got.items()})
                    print(line, flush=True)
                    if args.out:
                        with args.out.open("a") as f:
                            f.write(line + "\n")
        finally:
            if proxy is not None:
                proxy.terminate()
                proxy.wait(10)


if __name__ == "__main__":
    main()
