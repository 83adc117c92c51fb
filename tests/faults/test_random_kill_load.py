"""Random kills under load: 300 runs of five calls alternating a reconciled tool (op-1, op-3, op-5)
and a plain one (op-2, op-4), on three workers (-c 32, lease 1 s). A random worker is killed with
SIGKILL at a random moment, while it holds running runs, and restarted under its name, again and
again while runs are in flight. Afterwards every run has succeeded, or waits in doubt on a plain
call (at most once: the only gap outlast may declare); no plain call took effect twice; every
reconciled call before the end of the run took effect exactly once; nothing happened after an
in-doubt call; nothing failed.

FAULTS_SEED replays a sequence of kills."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time

import pytest

from tests.apps.faults import MIXED
from tests.faults import FaultWorld, enqueue_many, in_doubt_ops, running_held_by

pytestmark = pytest.mark.crash

RUNS = 300
WORKERS = 3
CALL = 0.3  # seconds each call sleeps: a run lasts ~1.5 s, so kills land inside runs and tools
LANDED = 5  # kills, at least, that hit a worker holding running runs
CHAOS = 40.0  # seconds of kills at most
OPS = [f"op-{k}" for k in range(1, len(MIXED) + 1)]
RECONCILED = {op for op, tool in zip(OPS, MIXED, strict=True) if tool == "reconciled"}


def verdict(fw: FaultWorld, ids: list[str]) -> list[str]:
    """What is wrong with the world and the runs afterwards (nothing, if all is well)."""
    problems = []
    states = dict(
        fw.sql("SELECT id, coalesce(state || '/' || reason, state) FROM runs WHERE id = ANY(%s)", ids)
    )
    effects = fw.effects()
    doubts = in_doubt_ops(fw)
    for rid in ids:
        state = states.get(rid, "missing")
        n = {op: effects[(rid, op)] for op in OPS}
        if state == "succeeded":
            wrong = {op: k for op, k in n.items() if k != 1}
            if wrong:
                problems.append(f"run {rid} succeeded with effects per operation {wrong} (want 1 each)")
            continue
        if state != "waiting/in_doubt":
            problems.append(f"run {rid} is {state}")
            continue
        doubted = doubts.get(rid, [])
        if len(doubted) != 1 or doubted[0][1] != "slow_effect":
            problems.append(f"run {rid} in doubt on {doubted}: only one plain call may be")
            continue
        position = OPS.index(doubted[0][0])
        for op in OPS[:position]:
            if n[op] != 1:
                problems.append(f"run {rid}: {op} before the in-doubt call has {n[op]} effects")
        if n[OPS[position]] > 1:
            problems.append(f"run {rid}: the in-doubt {OPS[position]} took effect {n[OPS[position]]} times")
        for op in OPS[position + 1 :]:
            if n[op]:
                problems.append(f"run {rid}: {op} after the in-doubt call has {n[op]} effects")
    stray = [k for k in effects if k[0] not in states or k[1] not in OPS]
    if stray:
        problems.append(f"effects of unknown operations: {stray[:5]}")
    return problems


@pytest.mark.timeout(300)
def test_random_kills_under_load(fw: FaultWorld) -> None:
    seed = int(os.environ.get("FAULTS_SEED") or time.time())
    rng = random.Random(seed)
    print(f"\nFAULTS_SEED={seed}")
    args = ("-c", "32", "--lease-ttl", "1")
    env = {"OUTLAST_LEASE_TTL": "1", "OUTLAST_MAX_ATTEMPTS": "1000"}  # the kills are ours, not the runs'
    names = [f"k-{n}" for n in range(WORKERS)]
    procs: dict[str, subprocess.Popen[bytes]] = {n: fw.start(n, *args, **env) for n in names}
    ids = enqueue_many(fw, "mixed", [{"seconds": CALL} for _ in range(RUNS)])
    kills = landed = 0
    end = time.monotonic() + CHAOS
    while time.monotonic() < end and fw.settled(ids) < RUNS:
        time.sleep(rng.uniform(0.2, 0.8))  # a random moment
        name = rng.choice(names)
        held = running_held_by(fw, name)
        procs[name].send_signal(signal.SIGKILL)
        procs[name].wait(10)
        kills += 1
        landed += bool(held)
        time.sleep(rng.uniform(0.0, 0.5))
        procs[name] = fw.start(name, *args, **env)
    print(f"{kills} kills, {landed} of them while the worker held running runs")
    took = fw.wait_settled(ids, timeout=120)
    states = fw.states()
    effects = fw.effects()
    plain = sum(n for (_r, op), n in effects.items() if op not in RECONCILED)
    reconciled = sum(n for (_r, op), n in effects.items() if op in RECONCILED)
    print(
        f"settled {took:.1f}s after the last kill; runs by state: {dict(states)}; effects: {plain} plain, "
        f"{reconciled} reconciled over {len(effects)} operations; max per operation "
        f"{max(effects.values(), default=0)}"
    )
    assert landed >= LANDED, f"only {landed} of {kills} kills landed while runs were running"
    problems = verdict(fw, ids)
    assert not problems, f"{len(problems)} problems:\n" + "\n".join(problems[:20])
    assert "Traceback" not in fw.logs(), fw.log_lines("Traceback", 2)
