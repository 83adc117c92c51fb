"""Random kills: 50 runs of a ten-operation workflow (reads, idempotent transfers, reconciled
notifications, plain posts, a journaled uuid) on three worker processes, one of which is killed
with SIGKILL at a random moment about every second and restarted, for a bounded time. Once the
survivors have finished, every run has succeeded or waits on a declared in-doubt operation, no
effect is duplicated, and every in-doubt operation is a real gap."""

from __future__ import annotations

import os
import random
import time
from typing import Any

import pytest

from outlast import Client
from tests.conftest import World, wait_for
from tests.crash import APP, bank_world, journal, rows

pytestmark = [pytest.mark.crash, pytest.mark.slow]

RUNS = 50
CHAOS = 20.0  # seconds of kills
# The ten operations of tests/apps/bank.py's ``mixed``: operation -> (tool, result key).
OPS = {
    "op-1": ("balance", "balance"),
    "op-2": ("transfer", "t1"),
    "op-3": ("notify", "n1"),
    "op-4": ("post", "p1"),
    "op-5": (None, "uuid"),
    "op-6": ("lookup", "lookup"),
    "op-7": ("transfer", "t2"),
    "op-8": ("notify", "n2"),
    "op-9": ("post", "p2"),
    "op-10": ("statement", "statement"),
}
EFFECTS = {"transfer": "bank", "notify": "outbox", "post": "posts"}


def by_op(world: World, table: str, run_id: str) -> dict[str, list[tuple[Any, ...]]]:
    out: dict[str, list[tuple[Any, ...]]] = {}
    for row in rows(world, table, run_id):
        op = row[2] if table == "posts" else row[3]  # see the tables in tests/apps/bank.py
        out.setdefault(op, []).append(row)
    return out


def stored(table: str, row: tuple[Any, ...]) -> dict[str, Any]:
    """A world row in the shape its tool returned it."""
    if table == "bank":
        return {"id": row[0], "key": row[1], "amount": row[4], "to": row[5]}
    if table == "outbox":
        return {"message_id": row[1], "id": row[0]}
    return {"post": row[0]}


def check_succeeded(world: World, rid: str, result: dict[str, Any]) -> None:
    """Every effect of a finished run happened exactly once, and the run reports that one."""
    for table in EFFECTS.values():
        found = by_op(world, table, rid)
        for op, (tool, key) in OPS.items():
            if EFFECTS.get(tool or "") != table:
                continue
            assert len(found.get(op, [])) == 1, f"run {rid} {op} ({tool}): {found.get(op)} in {table}"
            assert result[key] == stored(table, found[op][0]), f"run {rid} {op}: result and world differ"


def check_in_doubt(world: World, rid: str) -> None:
    """A run waiting in doubt: one operation, a plain tool's, with an intention and no result,
    the last thing in the journal; nothing after it reached the world."""
    entries = journal(world, rid)
    doubted = [op for _s, kind, op, _b in entries if kind == "in_doubt"]
    assert len(doubted) == 1, f"run {rid}: in doubt on {doubted}"
    op = doubted[0]
    kinds = [kind for _s, kind, o, _b in entries if o == op]
    intention = next(b for _s, kind, o, b in entries if (kind, o) == ("intention", op))
    assert intention["tool"] == "post", f"run {rid}: {op} ({intention['tool']}) declared in doubt"
    assert kinds == ["intention", "in_doubt"], f"run {rid}: {op} has {kinds}: not a gap"
    assert entries[-1][1:3] == ("in_doubt", op)
    assert len(by_op(world, "posts", rid).get(op, [])) <= 1, f"run {rid}: {op} posted twice"
    position = int(op.split("-")[1])
    for table in EFFECTS.values():
        later = [o for o in by_op(world, table, rid) if int(o.split("-")[1]) > position]
        assert not later, f"run {rid}: effects {later} in {table} after the in-doubt {op}"


def test_random_kills(world: World) -> None:
    seed = int(os.environ.get("CRASH_SEED") or time.time())
    rng = random.Random(seed)
    print(f"CRASH_SEED={seed}")
    env = {"BANK_PACE": "0.2", "OUTLAST_CONCURRENCY": "4", "OUTLAST_MAX_ATTEMPTS": "1000"}
    with bank_world(world) as client:
        workers = [world.worker(APP, **env) for _ in range(3)]
        ids: list[str] = []
        kills = 0
        start = time.monotonic()
        next_kill = start + rng.uniform(0.5, 1.5)
        while time.monotonic() - start < CHAOS:
            if len(ids) < RUNS:
                ids.append(client.enqueue("mixed", {"i": len(ids)}).id)
            if time.monotonic() >= next_kill:
                victim = rng.randrange(len(workers))
                workers[victim].kill()
                workers[victim].wait(10)
                workers[victim] = world.worker(APP, **env)
                kills += 1
                next_kill = time.monotonic() + rng.uniform(0.5, 1.5)
            time.sleep(0.3)
        while len(ids) < RUNS:
            ids.append(client.enqueue("mixed", {"i": len(ids)}).id)

        # The survivors finish everything.
        wait_for(lambda: all(settled_now(client, rid) for rid in ids), 90, 0.5, "every run to end or wait")
        outcome = {rid: client.status(rid) for rid in ids}
        in_doubt = [rid for rid, run in outcome.items() if run.state == "waiting"]
        print(f"{kills} kills, {len(in_doubt)} runs in doubt, {RUNS - len(in_doubt)} succeeded")
        assert kills >= 10
        assert world.logged("run.resumed"), "no run was ever taken over: the kills missed"

        for rid, run in outcome.items():
            ok = run.state == "succeeded" or (run.state, run.reason) == ("waiting", "in_doubt")
            assert ok, f"seed {seed}: run {rid} is {run.state} ({run.reason}): {run.error}"
            assert client.verify(rid) is None
            if run.state == "succeeded":
                check_succeeded(world, rid, run.result)
            else:
                check_in_doubt(world, rid)
        # No effect twice, whatever the run's state: one row per operation in every table.
        for table in EFFECTS.values():
            twice = world.sql(f"SELECT run_id, op_id FROM {table} GROUP BY 1, 2 HAVING count(*) > 1")
            assert twice == [], f"seed {seed}: duplicated in {table}: {twice}"


def settled_now(client: Client, rid: str) -> bool:
    run = client.status(rid)
    return run.final or run.state == "waiting"
