"""outlast side by side with its peers and with the servers' own limits, in one run, on the same
Postgres and the same Redis: the standing comparison of issue 9.

    python bench/run.py --quick     # a few seconds per measurement: checks the harness
    python bench/run.py             # the full comparison (~10 minutes on 2 cores, 5 rounds)

Throughput (interleaved rounds: every row is measured once per round, back to back, so each
round's ratio cancels the machine's drift): outlast, its writer variants and concurrency 256;
RQ (SimpleWorker, forking Worker), Celery (acks_late, -c 1, -c 2) and DBOS (queued workflows)
doing the same K steps; a raw INSERT+COMMIT loop, the fenced-append limit and Redis XADD; K = 1
and 5 operations, 1/2/4 worker processes. Then outlast's probes: latency percentiles, takeover
after SIGKILL, a 1,000-operation replay, memory at 200 runs at once. Writes
``bench/results/RESULTS.md``, ``throughput.png`` and ``raw.json`` (every round) (``--quick``: under
``bench/results/quick/``, not committed).

Postgres: --database-url (or OUTLAST_BENCH_DATABASE_URL); every measurement gets its own schema
(DBOS its own database), dropped afterwards. Redis: a private redis-server on a free port, no
persistence, flushed between measurements, stopped at the end. Peers: pip install -e '.[bench]'.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the bench's modules, for spawned children too

import cost
import limits
import outlast_runs
import peers
import probes
import report
from common import DEFAULT_DB, Config, Result, outlast_source, private_redis

from outlast._logs import configure

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Mode:
    runs: int  # per throughput measurement
    rounds: int
    slow_runs: int  # for the slow peers (DBOS, RQ's fork per job)
    latency_samples: int
    ttl: float
    takeovers: int
    replay_ops: int
    memory_runs: int
    hold: float


QUICK = Mode(
    runs=100,
    rounds=1,
    slow_runs=40,
    latency_samples=30,
    ttl=2.0,
    takeovers=1,
    replay_ops=1000,
    memory_runs=200,
    hold=2.0,
)
FULL = Mode(
    runs=800,
    rounds=5,
    slow_runs=200,
    latency_samples=200,
    ttl=5.0,
    takeovers=4,
    replay_ops=1000,
    memory_runs=200,
    hold=4.0,
)


def cells(cfg: Config, mode: Mode) -> list[tuple[report.Cell, Callable[[str], Result]]]:
    """Every throughput row, in the order each round measures them."""
    slow = replace(cfg, runs=min(cfg.runs, mode.slow_runs))
    batch = {"size": 16}
    rows: list[tuple[str, int, int, str, Callable[[str], Result]]] = [
        ("outlast", 5, 1, "ops", outlast_runs.measure(cfg, 5)),
        (
            "fenced-append limit (raw psycopg)",
            5,
            1,
            "writes",
            limits.fenced_append(cfg, lambda: batch["size"], 10 * cfg.runs),
        ),
        ("outlast, concurrency 256", 5, 1, "ops", outlast_runs.measure(cfg, 5, concurrency=256)),
        ("outlast, 1 transaction in flight", 5, 1, "ops", outlast_runs.measure(cfg, 5, in_flight=1)),
        ("outlast, 2 transactions in flight", 5, 1, "ops", outlast_runs.measure(cfg, 5, in_flight=2)),
        ("outlast, 3 transactions in flight", 5, 1, "ops", outlast_runs.measure(cfg, 5, in_flight=3)),
        ("outlast, 1 write per commit", 5, 1, "ops", outlast_runs.measure(slow, 5, writer="one-per-commit")),
        (
            f"outlast, commit per write on {cfg.pool} conns",
            5,
            1,
            "ops",
            outlast_runs.measure(slow, 5, writer="pool"),
        ),
        ("Celery acks_late -c 1", 5, 1, "ops", peers.celery_measure(cfg, 5, 1)),
        ("Celery acks_late -c 2", 5, 2, "ops", peers.celery_measure(cfg, 5, 2)),
        ("RQ SimpleWorker", 5, 1, "ops", peers.rq_measure(cfg, 5)),
        ("RQ Worker, fork per job", 5, 1, "ops", peers.rq_measure(slow, 5, fork=True)),
        ("DBOS queued workflows", 5, 1, "ops", peers.dbos_measure(slow, 5)),
        ("psycopg raw, INSERT+COMMIT per step", 5, 1, "ops", limits.raw_insert(cfg, 5)),
        ("Redis XADD, one connection", 1, 1, "xadd", limits.redis_xadd(cfg, 10 * cfg.runs)),
        ("outlast", 1, 1, "ops", outlast_runs.measure(cfg, 1)),
        ("Celery acks_late -c 1", 1, 1, "ops", peers.celery_measure(cfg, 1, 1)),
        ("RQ SimpleWorker", 1, 1, "ops", peers.rq_measure(cfg, 1)),
    ]
    for p in (2, 4):
        rows.append(("outlast", 5, p, "ops", outlast_runs.measure(cfg, 5, processes=p)))
        rows.append(("RQ SimpleWorker", 5, p, "ops", peers.rq_measure(cfg, 5, processes=p)))
    out = []
    for name, k, p, unit, fn in rows:
        cell = report.Cell(name, k, p, [], unit=unit)
        if name == "outlast" and k == 5 and p == 1:
            fn = _feeding(fn, batch)  # the fenced-append limit uses this round's batch size
        out.append((cell, fn))
    return out


def _feeding(fn: Callable[[str], Result], batch: dict[str, int]) -> Callable[[str], Result]:
    def run(name: str) -> Result:
        r = fn(name)
        if r.commits and r.writes:
            batch["size"] = round(r.writes / r.commits)
        return r

    return run


def measure_rounds(todo: list[tuple[report.Cell, Callable[[str], Result]]], rounds: int) -> None:
    for i in range(rounds):  # interleaved, so that drift hits every system alike
        for cell, fn in todo:
            if cell.failed:
                continue
            t = time.perf_counter()
            try:
                cell.rounds.append(fn(cell.name))
            except Exception as exc:  # a peer that cannot run here is reported, not fatal
                cell.failed = f"{type(exc).__name__}: {str(exc)[:160]}"
                traceback.print_exc()
            took = time.perf_counter() - t
            print(
                f"  [{i + 1}/{rounds}] {cell.name} K={cell.k} P={cell.processes}: {took:.1f}s",
                file=sys.stderr,
            )


def find(todo: list[report.Cell], name: str, k: int = 5, p: int = 1) -> report.Cell | None:
    for c in todo:
        if c.name == name and c.k == k and c.processes == p and c.rounds and not c.failed:
            return c
    return None


def target_rows(
    table: list[report.Cell], probe: dict[str, list[float]], mode: Mode, costs: list[dict[str, Any]]
) -> list[tuple[str, str, list[float], float, bool]]:
    o = find(table, "outlast")
    rows: list[tuple[str, str, list[float], float, bool]] = []
    for tool, bound in (("sync", 150), ("async", 120)):
        cpu = [r["worker CPU us/op"] for r in costs if r["tool"] == tool and r["K"] == 5]
        rows.append(
            (
                f"worker CPU per operation, {tool} idempotent tool, K = 5 ≤ {bound} µs",
                " µs",
                cpu,
                bound,
                False,
            )
        )

    def vs(label: str, peer: str, bound: float, per: str = "ops") -> None:
        c = find(table, peer, 5, 2 if peer.endswith("-c 2") else 1)
        values = [1 / x for x in report.ratios(c, o, per)] if o and c else []
        rows.append((label, "x", values, bound, True))

    vs("5-op runs/s, outlast / Celery acks_late -c 1 ≥ 1.0 (goal 1.5)", "Celery acks_late -c 1", 1.0)
    vs("5-op runs/s, outlast / RQ SimpleWorker ≥ 2.5", "RQ SimpleWorker", 2.5)
    vs("5-op runs/s, outlast / DBOS queued ≥ 25", "DBOS queued workflows", 25)
    vs(
        "durable writes/s, outlast / fenced-append limit at the same batch ≥ 0.8",
        "fenced-append limit (raw psycopg)",
        0.8,
        "writes",
    )
    c256 = find(table, "outlast, concurrency 256")
    rows.append(
        (
            "concurrency 256 / concurrency 32 ≥ 0.9",
            "x",
            report.ratios(c256, o) if c256 and o else [],
            0.9,
            True,
        )
    )
    rows.append(("enqueue call p50 ≤ 1.5 ms", " ms", probe.get("enqueue call p50 ms", []), 1.5, False))
    rows.append(("enqueue→start p50 ≤ 3 ms", " ms", probe.get("enqueue->start p50 ms", []), 3, False))
    rows.append(("enqueue→start p99 ≤ 15 ms", " ms", probe.get("enqueue->start p99 ms", []), 15, False))
    rows.append(
        ("per-operation p50 ≤ 1 ms at light load", " ms", probe.get("per-operation p50 ms", []), 1, False)
    )
    rows.append(
        (
            f"takeover after SIGKILL ≤ TTL + 1 s (TTL {mode.ttl:g} s)",
            " s",
            probe.get("takeover s", []),
            mode.ttl + 1,
            False,
        )
    )
    rows.append(
        (
            "takeover with a backlog ≤ TTL + 1 s",
            " s",
            probe.get("takeover, backlog s", []),
            mode.ttl + 1,
            False,
        )
    )
    replay = [
        a + b for a, b in zip(probe.get("replay ms", []), probe.get("journal load ms", []), strict=False)
    ]
    rows.append((f"{mode.replay_ops:,}-op resume ≤ 25 ms (replay + journal load)", " ms", replay, 25, False))
    rows.append(
        (f"RSS ≤ 60 MB at {mode.memory_runs} concurrent runs", " MB", probe.get("RSS peak MB", []), 60, False)
    )
    return rows


def _prefixed(peer: str, got: dict[str, float]) -> dict[str, float]:
    return {f"{'Celery -c 1' if peer == 'celery' else 'RQ SimpleWorker'}: {k}": v for k, v in got.items()}


def run_probes(cfg: Config, mode: Mode) -> tuple[dict[str, list[float]], list[str]]:
    got: dict[str, list[float]] = {}
    failed: list[str] = []

    def add(name: str, fn: Callable[[], dict[str, float]]) -> None:
        t = time.perf_counter()
        try:
            for key, v in fn().items():
                got.setdefault(key, []).append(v)
        except Exception as exc:
            failed.append(f"{name}: {type(exc).__name__}: {str(exc)[:160]}")
            traceback.print_exc()
        print(f"  probe {name}: {time.perf_counter() - t:.1f}s", file=sys.stderr)

    for _ in range(mode.rounds):
        add("latency", lambda: probes.latency(cfg, mode.latency_samples))
    for peer in ("celery", "rq"):
        for _ in range(mode.rounds):
            add(
                f"{peer} latency",
                lambda peer=peer: _prefixed(peer, peers.peer_latency(cfg, peer, mode.latency_samples)),
            )
    for _ in range(mode.takeovers):
        add("takeover", lambda: {"takeover s": probes.takeover(cfg, mode.ttl)})
    for _ in range(mode.takeovers):
        add(
            "takeover, backlog",
            lambda: {"takeover, backlog s": probes.takeover(cfg, mode.ttl, backlog=cfg.runs)},
        )
    for _ in range(3):
        add("replay", lambda: probes.replay(cfg, mode.replay_ops))
    add("memory", lambda: probes.memory(cfg, mode.memory_runs, mode.hold))
    return got, failed


COST_NOTE = (
    "One `outlast worker` process draining N pre-enqueued runs of K operations of a sync idempotent "
    "tool (run in a thread), an async idempotent tool or a read tool; median of the rounds, CPU as "
    "median (min-max). Worker CPU: the worker process's user+sys. Postgres backend CPU: user+sys of "
    "the server processes serving the worker, from /proc/<pid>/stat (background processes not "
    "counted). Commits: pg_stat_database.xact_commit of the measurement's own database (everything "
    "the worker committed: writer batches, reads, lease renewals, heartbeats). Statements: the "
    "worker's own counts (writes through the writer + read round trips; renewals not counted)."
)


def only_cost(args: argparse.Namespace, mode: Mode, out: Path) -> None:
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    with private_redis() as redis_url:
        cfg = Config(args.database_url, redis_url, mode.runs, args.concurrency)
        costs = cost.run(cfg, mode.rounds)
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    head = (
        f"{when}; {os.cpu_count()} cores; {outlast_source()}; `bench/run.py --only cost"
        f"{' --quick' if args.quick else ''}`: {mode.runs} runs per measurement, concurrency "
        f"{cfg.concurrency}, {mode.rounds} interleaved round(s); load average {load_before:.1f} before, "
        f"{os.getloadavg()[0]:.1f} after; took {time.perf_counter() - started:.0f} s"
    )
    text = "\n\n".join(["# bench: cost per operation", head, COST_NOTE, cost.table(costs)])
    out.mkdir(parents=True, exist_ok=True)
    (out / "COST.md").write_text(text + "\n")
    (out / "cost.json").write_text(json.dumps(costs, indent=1) + "\n")
    print(text)


def only_latency(args: argparse.Namespace, mode: Mode) -> None:
    """The light-load latency probes alone: outlast's, then Celery's and RQ's, once per round,
    interleaved; each figure's median (min-max) printed, nothing written."""
    got: dict[str, list[float]] = {}
    load_before = os.getloadavg()[0]
    with private_redis() as redis_url:
        cfg = Config(args.database_url, redis_url, mode.runs, args.concurrency)
        for i in range(mode.rounds):
            for name, probe in (
                ("outlast", lambda: probes.latency(cfg, mode.latency_samples)),
                (
                    "celery",
                    lambda: _prefixed("celery", peers.peer_latency(cfg, "celery", mode.latency_samples)),
                ),
                ("rq", lambda: _prefixed("rq", peers.peer_latency(cfg, "rq", mode.latency_samples))),
            ):
                for key, v in probe().items():
                    got.setdefault(key, []).append(v)
                print(f"  [{i + 1}/{mode.rounds}] {name} latency", file=sys.stderr)
    print(
        f"{mode.latency_samples} runs 20 ms apart, {mode.rounds} round(s); "
        f"load average {load_before:.1f} before"
    )
    for key, values in got.items():
        print(f"- {key}: {report.fmt_spread(values, '.2f', '')}")


def only_memory(args: argparse.Namespace, mode: Mode) -> None:
    with private_redis() as redis_url:
        cfg = Config(args.database_url, redis_url, mode.runs, args.concurrency)
        for _ in range(mode.rounds):
            got = probes.memory(cfg, mode.memory_runs, mode.hold)
            print(", ".join(f"{k}: {v:.1f}" for k, v in got.items()))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="a few seconds per measurement, one round")
    p.add_argument("--rounds", type=int, help="interleaved rounds (default: 5, --quick 1)")
    p.add_argument("--runs", type=int, help="runs per throughput measurement (default 800, --quick 100)")
    p.add_argument("--concurrency", type=int, default=32, help="outlast worker concurrency (default 32)")
    p.add_argument("--sync-tool", action="store_true", help="outlast calls a sync tool (run in a thread)")
    p.add_argument("--no-probes", action="store_true", help="throughput only")
    p.add_argument(
        "--only",
        choices=["cost", "latency", "memory"],
        help="one section alone: cost (worker and Postgres CPU per operation, statements and commits "
        "per run) writes COST.md and cost.json; latency prints the light-load probes' figures; memory "
        "(the worker's RSS idle and holding 200 runs) prints it",
    )
    p.add_argument("--out", type=Path, help="where to write RESULTS.md and throughput.png")
    p.add_argument("--database-url", default=os.environ.get("OUTLAST_BENCH_DATABASE_URL", DEFAULT_DB))
    args = p.parse_args()
    mode = QUICK if args.quick else FULL
    mode = replace(mode, rounds=args.rounds or mode.rounds, runs=args.runs or mode.runs)
    out = args.out or (HERE / "results" / "quick" if args.quick else HERE / "results")
    configure("json", logging.WARNING)
    if args.only == "cost":
        only_cost(args, mode, out)
        return
    if args.only == "latency":
        only_latency(args, mode)
        return
    if args.only == "memory":
        only_memory(args, mode)
        return
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    with private_redis() as redis_url:
        cfg = Config(
            args.database_url,
            redis_url,
            mode.runs,
            args.concurrency,
            tool="bump_sync" if args.sync_tool else "bump",
        )
        todo = cells(cfg, mode)
        measure_rounds(todo, mode.rounds)
        costs = cost.run(cfg, mode.rounds)
        probe, probe_failed = ({}, []) if args.no_probes else run_probes(cfg, mode)
    table = [c for c, _ in todo]
    reference = {(c.k, c.processes): c for c in table if c.name == "outlast"}
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    machine = (
        f"{os.cpu_count()} cores ({platform.processor() or platform.machine()}), Linux {platform.release()}, "
        f"Python {sys.version.split()[0]}; Postgres, Redis and the workers on the same machine"
    )
    head = (
        f"{when}; {machine}; {outlast_source()}; `bench/run.py{' --quick' if args.quick else ''}`: "
        f"{mode.runs} runs per measurement, outlast concurrency {cfg.concurrency}, {mode.rounds} interleaved "
        f"round(s); load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after; "
        f"bench took {time.perf_counter() - started:.0f} s"
    )
    failures = [f"- {c.name} K={c.k} P={c.processes}: {c.failed}" for c in table if c.failed] + [
        f"- probe {f}" for f in probe_failed
    ]
    text = "\n\n".join(
        [
            "# bench results",
            head,
            "## Targets",
            report.targets_table(target_rows(table, probe, mode, costs)),
            "## Throughput",
            report.throughput_table(table, reference),
            "## Cost per operation",
            COST_NOTE,
            cost.table(costs),
            "## Probes (outlast)",
            "\n".join(f"- {k}: {report.fmt_spread(v, '.1f', '')}" for k, v in probe.items()) or "- not run",
            "## Failed",
            "\n".join(failures) or "- nothing",
        ]
    )
    out.mkdir(parents=True, exist_ok=True)
    (out / "RESULTS.md").write_text(text + "\n")
    (out / "raw.json").write_text(report.raw(table, probe) + "\n")
    (out / "cost.json").write_text(json.dumps(costs, indent=1) + "\n")
    try:
        report.chart(out / "throughput.png", table, f"outlast bench, {when}, {os.cpu_count()} cores")
    except Exception as exc:
        print(f"no chart: {exc}", file=sys.stderr)
    print(text)


if __name__ == "__main__":
    main()
