"""The nemesis: a real workload (tests/apps/nemesis.py) on private servers, and a seeded random
schedule of faults, several at once, then the world's tables checked for anything lost, doubled or
stuck. ``Nemesis.run`` does it all; tests/nemesis/test_nemesis.py runs a short schedule, and
``bench/nemesis.py --minutes M --seed S`` a long one (docs/faults.md, "Nemesis").

The servers are the nemesis's own: a Postgres primary with a synchronous standby
(tests/faults/pair.py) and a Redis (tests/faults/__init__.py), each worker reaching them through
links of its own (tests/nemesis/links.py). The world's tables (ledger, effects, fences) live on the
test Postgres, which no fault touches. The same seed gives the same schedule and the same runs."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import redis

from outlast import AsyncClient
from outlast.settings import Settings
from tests.apps import nemesis as app
from tests.conftest import ROOT, World, migrate_schema
from tests.faults import PrivateRedis, _children
from tests.faults.pair import Pair
from tests.nemesis import checks
from tests.nemesis.checks import Window
from tests.nemesis.links import Link, Links
from tests.nemesis.watchers import Dashboard, Takeovers
from tests.nemesis.workload import plan

APP = "tests.apps.nemesis:app"
SKEW = Path(__file__).parent / "skew"
TTL = 2.0
GRACE = 1.0
# Each worker: its name, its arguments, its clock's offset (seconds).
WORKERS = (
    ("nem-a", ("-c", "8"), 0.0),
    ("nem-b", ("-c", "6", "--processes", "2"), 0.0),
    ("nem-c", ("-c", "8"), 3600.0),
)
# The kinds of fault, each with what it holds while it lasts (one fault at a time on each).
WORKER_FAULTS = ("kill", "pause", "term")
LINK_FAULTS = ("cut_pg", "cut_redis", "cut_both", "half_pg", "half_redis", "slow_pg", "slow_redis")
PG_FAULTS = ("pg_restart", "pg_readonly", "failover", "migrate")
MIGRATION = "ALTER TABLE runs ADD COLUMN nemesis_probe int"  # an expand step: a lock on the busiest table
REDIS_FAULTS = ("redis_restart", "redis_loss", "redis_full")


@dataclass(frozen=True)
class Fault:
    kind: str
    target: int  # the worker, for worker and link faults
    at: float  # seconds from the schedule's start
    length: float


def schedule(seed: int, seconds: float) -> list[Fault]:
    """The faults of a seed: one begins every 0.5-2.5 s, lasts 1-5 s, several overlap; never
    two at once on one worker, one link, Postgres or Redis; at most one failover."""
    rng = random.Random(seed)
    kinds = WORKER_FAULTS * 2 + LINK_FAULTS + PG_FAULTS + REDIS_FAULTS
    busy: dict[str, float] = {}
    out: list[Fault] = []
    t, failed_over = 1.5, False
    while t < seconds:
        kind, target = rng.choice(kinds), rng.randrange(len(WORKERS))
        length = round(rng.uniform(1.0, 5.0), 2)
        if kind in WORKER_FAULTS:
            hold = [f"w{target}"]
        elif kind in LINK_FAULTS:
            hold = [
                f"w{target}",
                *(f"l{target}{s}" for s in ("pg", "redis") if s in kind or kind == "cut_both"),
            ]
        else:
            hold = ["pg" if kind in PG_FAULTS else "redis"]
        if kind == "failover" and failed_over:
            kind = "pg_restart"
        if all(busy.get(h, 0.0) <= t for h in hold):
            failed_over |= kind == "failover"
            out.append(Fault(kind, target, round(t, 2), length))
            for h in hold:
                busy[h] = t + length + 1.0
        t += rng.uniform(0.5, 2.5)
    return out


@dataclass
class Report:
    seed: int
    faults: Counter[str] = field(default_factory=Counter)
    windows: list[Window] = field(default_factory=list)
    zero: float = 0.0  # the schedule's start, wall clock
    violations: list[str] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)


class Nemesis:
    """Servers, links, workers, producers and the schedule of one seed, under ``root``."""

    def __init__(self, root: Path, world_url: str, seed: int, seconds: float, rate: float = 2.0) -> None:
        self.root, self.seed, self.seconds, self.rate = root, seed, seconds, rate
        self.world_url = world_url
        (root / "pg").mkdir(parents=True)
        (root / "pg").chmod(0o755)  # the postgres user must reach its directories
        self.pair = Pair(root / "pg")
        (root / "redis-home").mkdir(parents=True)
        self.rd = PrivateRedis(root / "redis-home")
        self.primary = self.pair.primary
        self.links = Links()
        tag = f"{seed % 100000}_{os.getpid()}"
        self.world_schema = f"nem_{tag}"
        self.tmp = root / "logs"
        self.tmp.mkdir()
        self.world = World("", self.rd.url, "outlast", f"nem{tag}", self.tmp)
        self.report = Report(seed)
        self.procs: dict[int, subprocess.Popen[bytes] | None] = {}
        self.producers: list[subprocess.Popen[bytes]] = []
        self.link: dict[tuple[int, str], Link] = {}
        self.count = 0  # runs each producer enqueues
        self.logname: dict[int, str] = {}
        self.born: dict[int, float] = {}
        self.fence_seen = 0  # the last effect watched
        self.fence_last: dict[str, int] = {}  # each run's newest token among its effects
        self.down: set[int] = set()  # workers killed or stopped by a fault under way
        self.takeovers = Takeovers(self.sql)
        self.dashboard: Dashboard | None = None
        self.migration: psycopg.Connection[Any] | None = None  # holds the migration's lock

    # -- the servers -----------------------------------------------------------------------

    def pg_port(self) -> int:
        return self.primary.port

    def url(self, port: int) -> str:
        return f"postgresql://postgres@127.0.0.1:{port}/postgres"

    def start(self) -> None:
        self.pair.start()
        self.rd.start()
        self.world.database_url = self.url(self.pg_port())
        migrate_schema(self.world.database_url, "outlast")
        app.setup(self.world_url, self.world_schema)
        for w in range(len(WORKERS) + 1):  # the last: the producers'
            self.link[(w, "pg")] = self.links.link(f"w{w}-pg", self.pg_port)
            self.link[(w, "redis")] = self.links.link(f"w{w}-redis", lambda: self.rd.port)
        for w in range(len(WORKERS)):
            self.start_worker(w)
        self.takeovers.thread.start()
        first = self.planned_ids(1)[0]
        self.dashboard = Dashboard(self.world.env(**self.env(len(WORKERS))), self.tmp, first)
        self.dashboard.recovered(30.0)  # listening before the first probe counts
        self.dashboard.thread.start()

    def env(self, w: int) -> dict[str, str]:
        env = {
            "OUTLAST_DATABASE_URL": self.url(self.link[(w, "pg")].port),
            "OUTLAST_REDIS_URL": f"redis://127.0.0.1:{self.link[(w, 'redis')].port}/0",
            "OUTLAST_LEASE_TTL": f"{TTL:g}",
            "OUTLAST_GRACE": f"{GRACE:g}",
            "FAULTS_EFFECTS_URL": self.world_url,
            "FAULTS_EFFECTS_SCHEMA": self.world_schema,
        }
        if w < len(WORKERS) and WORKERS[w][2]:
            env["PYTHONPATH"] = f"{SKEW}{os.pathsep}{ROOT}"
            env["NEMESIS_CLOCK_OFFSET"] = f"{WORKERS[w][2]:g}"
        return env

    def start_worker(self, w: int) -> None:
        name, args, _skew = WORKERS[w]
        self.logname[w] = f"worker-{len(self.world.procs)}.log"
        self.born[w] = time.monotonic()
        self.procs[w] = self.world.worker(APP, *args, OUTLAST_WORKER_NAME=name, **self.env(w))

    def pids(self, w: int) -> list[int]:
        p = self.procs.get(w)
        if p is None or p.poll() is not None:
            return []
        return [p.pid, *_children(p.pid)]

    def signal(self, w: int, sig: signal.Signals) -> None:
        for pid in self.pids(w):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

    def sql(self, statement: str, *params: Any) -> list[tuple[Any, ...]]:
        with psycopg.connect(
            self.url(self.pg_port()),
            autocommit=True,
            options="-c search_path=outlast -c lock_timeout=2s",  # never behind the migration's lock
            connect_timeout=5,
        ) as c:
            cur = c.execute(statement.encode(), params)
            return cur.fetchall() if cur.description else []

    def world_sql(self, statement: str, *params: Any) -> list[tuple[Any, ...]]:
        with psycopg.connect(
            self.world_url, autocommit=True, options=f"-c search_path={self.world_schema}"
        ) as c:
            cur = c.execute(statement.encode(), params)
            return cur.fetchall() if cur.description else []

    def admin(self, statement: str) -> None:
        """As the server's superuser on the primary, outside read-only."""
        with psycopg.connect(self.url(self.pg_port()), autocommit=True, connect_timeout=5) as c:
            c.execute(b"SET default_transaction_read_only = off")
            c.execute(statement.encode())

    def redis(self) -> redis.Redis:
        return redis.Redis.from_url(self.rd.url, socket_timeout=2, socket_connect_timeout=2)

    # -- the faults ------------------------------------------------------------------------

    def begin(self, f: Fault) -> None:
        w = f.target
        if f.kind in WORKER_FAULTS:
            # A worker signalled within moments of its spawn may lose the signal between fork and
            # exec (the harness's own race, not the worker's): each is given a second first.
            time.sleep(max(self.born.get(w, 0.0) + 1.0 - time.monotonic(), 0.0))
        if f.kind in ("kill", "term"):
            self.down.add(w)
        if f.kind in WORKER_FAULTS:
            self.takeovers.struck(WORKERS[w][0], f.kind)
        if f.kind.startswith(("cut_", "half_", "slow_")):
            how, _, where = f.kind.partition("_")
            for s in ("pg", "redis") if where == "both" else (where,):
                link = self.link[(w, s)]
                if how == "slow":
                    link.slow(0.05 + 0.15 * random.Random(f"{self.seed}/{f.at}").random())
                else:
                    (link.cut if how == "cut" else link.half)()
            return
        getattr(self, f"begin_{f.kind}")(w)

    def begin_kill(self, w: int) -> None:
        self.signal(w, signal.SIGKILL)

    def begin_pause(self, w: int) -> None:
        self.signal(w, signal.SIGSTOP)

    def begin_term(self, w: int) -> None:
        self.signal(w, signal.SIGCONT)
        p = self.procs.get(w)
        if p is not None and p.poll() is None:
            p.send_signal(signal.SIGTERM)

    def begin_pg_restart(self, w: int) -> None:
        self.primary.stop()

    def begin_pg_readonly(self, w: int) -> None:
        self.admin("ALTER SYSTEM SET default_transaction_read_only = on")
        self.admin("SELECT pg_reload_conf()")

    def begin_failover(self, w: int) -> None:
        self.pair.crash_primary()
        time.sleep(1.0)  # a failover manager's detection
        self.pair.promote()
        self.primary = self.pair.standby
        self.world.database_url = self.url(self.pg_port())
        for link in self.link.values():
            if link.name.endswith("-pg"):
                link.reset()

    def begin_migrate(self, w: int) -> None:
        """A migration under load: a DDL that takes the busiest table's lock, held for the fault's
        length (its transaction then rolled back), then ``outlast migrate`` run again, waited for
        (no other fault begins meanwhile: Postgres is this fault's until it is done)."""
        c = psycopg.connect(self.url(self.pg_port()), options="-c search_path=outlast", connect_timeout=5)
        c.execute(b"SET lock_timeout = '5s'")
        c.execute(MIGRATION.encode())
        self.migration = c

    def end_migrate(self) -> None:
        c, self.migration = self.migration, None
        if c is not None:
            with contextlib.suppress(psycopg.Error):
                c.rollback()
            c.close()
        done = self.world.cli("migrate", **self.env(len(WORKERS)))
        self.report.figures["outlast migrate run again under load"] = (
            self.report.figures.get("outlast migrate run again under load", 0) + 1
        )
        if done.returncode:
            self.report.violations.append(
                f"outlast migrate under load exited {done.returncode}: {done.stdout}{done.stderr}"[:400]
            )

    def begin_redis_restart(self, w: int) -> None:
        self.rd.stop()

    def begin_redis_loss(self, w: int) -> None:
        self.rd.stop(signal.SIGKILL)
        for p in self.rd.dir.iterdir():
            if p.name != "redis.log":
                shutil.rmtree(p) if p.is_dir() else p.unlink()
        self.rd.persistent = False

    def begin_redis_full(self, w: int) -> None:
        with contextlib.closing(self.redis()) as r:
            used = int(r.info("memory")["used_memory"])
            r.config_set("maxmemory-policy", "noeviction")
            r.config_set("maxmemory", str(used + 65536))

    def end(self, f: Fault) -> None:
        w = f.target
        if f.kind in ("kill", "term"):
            self.down.discard(w)
        if f.kind == "kill":
            self.start_worker(w)
        elif f.kind == "pause":
            self.signal(w, signal.SIGCONT)
        elif f.kind == "term":
            self.end_term(w, f.length)
        elif f.kind.startswith(("cut_", "half_", "slow_")):
            for s in ("pg", "redis"):
                self.link[(w, s)].mend()
        elif f.kind == "pg_restart":
            self.primary.start()
        elif f.kind == "pg_readonly":
            self.admin("ALTER SYSTEM RESET default_transaction_read_only")
            self.admin("SELECT pg_reload_conf()")
        elif f.kind == "migrate":
            self.end_migrate()
        elif f.kind in ("redis_restart", "redis_loss"):
            self.rd.start(self.rd.persistent)
        elif f.kind == "redis_full":
            with contextlib.closing(self.redis()) as r:
                r.config_set("maxmemory", "0")

    def end_term(self, w: int, length: float) -> None:
        """The worker exited within its grace period + 5 s of SIGTERM, whatever else went on."""
        p = self.procs[w]
        assert p is not None
        try:
            p.wait(max(GRACE + 5 - length, 0.1))
        except subprocess.TimeoutExpired:
            self.report.violations.append(
                f"{WORKERS[w][0]} (pid {p.pid}, {self.logname[w]}) had not exited {GRACE + 5:g}s "
                "after SIGTERM"
            )
            self.signal(w, signal.SIGKILL)
            p.wait(10)
        self.start_worker(w)

    def revive(self) -> None:
        """A worker that died on its own (one started while Postgres or Redis was out of reach
        exits, as a deployment's supervisor would see): started again, and counted; the dashboard
        too."""
        for w in range(len(WORKERS)):
            p = self.procs.get(w)
            if w not in self.down and p is not None and p.poll() is not None:
                self.report.figures["workers that exited on their own"] = (
                    self.report.figures.get("workers that exited on their own", 0) + 1
                )
                self.start_worker(w)
        if self.dashboard is not None:
            self.dashboard.revive()

    def heal(self) -> None:
        """Every link mended, every worker running and resumed, every server up and writable."""
        for link in self.link.values():
            link.mend()
        if not self.primary.running():
            self.primary.start()
        self.admin("ALTER SYSTEM RESET default_transaction_read_only")
        self.admin("SELECT pg_reload_conf()")
        if not self.rd.running():
            self.rd.start(self.rd.persistent)
        with contextlib.closing(self.redis()) as r:
            r.config_set("maxmemory", "0")
        for w in range(len(WORKERS)):
            self.signal(w, signal.SIGCONT)
            p = self.procs.get(w)
            if p is None or p.poll() is not None:
                self.start_worker(w)
        if self.dashboard is not None:
            self.dashboard.revive()

    # -- the run ---------------------------------------------------------------------------

    def produce(self) -> None:
        self.count = max(int(self.seconds * self.rate / 2), 4)
        for k in range(2):
            env = self.world.env(**self.env(len(WORKERS)))
            with open(self.tmp / f"producer-{k}.log", "wb") as out:
                self.producers.append(
                    subprocess.Popen(
                        [
                            sys.executable,
                            "-m",
                            "tests.nemesis.producer",
                            str(self.seed),
                            str(k),
                            str(self.count),
                            f"{self.rate / 2:g}",
                            str(self.tmp),
                        ],
                        env=env,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        cwd=ROOT,
                    )
                )

    def run(self, heal_for: float) -> Report:
        faults = schedule(self.seed, self.seconds)
        print(f"\nnemesis: seed {self.seed}, {len(faults)} faults over {self.seconds:g}s", flush=True)
        events = sorted(
            [(f.at, 1, i) for i, f in enumerate(faults)]
            + [(f.at + f.length, 0, i) for i, f in enumerate(faults)]
        )
        began_wall: dict[int, float] = {}
        self.produce()
        began = time.monotonic()
        self.report.zero = time.time()
        finals: list[tuple[float, int]] = []
        for at, starting, i in events:
            time.sleep(max(began + at - time.monotonic(), 0.0))
            f = faults[i]
            try:
                if starting:
                    began_wall[i] = time.time()
                    self.begin(f)
                    self.report.faults[f.kind] += 1
                else:
                    self.end(f)
                    self.report.windows.append(Window(f.kind, self.target(f), began_wall[i], time.time()))
            except Exception as exc:  # a fault that could not be applied is a finding of its own
                self.report.violations.append(f"applying {f} ({'begin' if starting else 'end'}): {exc}")
            self.revive()
            self.watch()
            with contextlib.suppress(Exception):
                finals.append((time.monotonic() - began, self.final_count()))
        self.heal()
        faulted = time.monotonic() - began
        self.report.figures["fault phase s"] = round(faulted, 1)
        done = finals[-1][1] if finals else 0
        self.report.figures["runs final during faults"] = done
        self.report.figures["runs final per second during faults"] = round(done / faulted, 2)
        self.settle(heal_for)
        self.report.figures["healed in s"] = round(time.monotonic() - began - faulted, 1)
        (self.tmp / "stop").write_text("")
        for p in self.producers:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(30)
        self.check()
        return self.report

    def target(self, f: Fault) -> str:
        if f.kind in PG_FAULTS:
            return "postgres"
        return "redis" if f.kind in REDIS_FAULTS else WORKERS[f.target][0]

    def final_count(self) -> int:
        return int(
            self.sql("SELECT count(*) FROM runs WHERE state IN ('succeeded', 'failed', 'cancelled')")[0][0]
        )

    def planned(self) -> list[str]:
        return [p.run_id for k in range(2) for p in plan(self.seed, k, self.count)]

    def planned_ids(self, count: int) -> list[str]:
        return [p.run_id for p in plan(self.seed, 0, count)]

    def settle(self, timeout: float) -> None:
        """Wait until every run is final, resolving each in-doubt operation by the world's truth."""
        ids = self.planned()
        until = time.monotonic() + timeout
        while time.monotonic() < until:
            try:
                self.resolve_in_doubt()
                known = self.sql("SELECT count(*) FROM runs WHERE id = ANY(%s)", ids)[0][0]
                left = self.sql(
                    "SELECT count(*) FROM runs WHERE state NOT IN ('succeeded', 'failed', 'cancelled')"
                )
                if known == len(ids) and left[0][0] == 0:
                    return
            except psycopg.Error:
                pass
            time.sleep(0.5)

    def resolve_in_doubt(self) -> None:
        rows = self.sql(
            "SELECT d.run_id, d.op_id, d.created_at FROM journal d JOIN runs r ON r.id = d.run_id "
            "WHERE d.kind = 'in_doubt' AND r.state = 'waiting' AND r.reason = 'in_doubt'"
        )
        for rid, op, _at in rows:
            n = self.world_sql("SELECT count(*) FROM effects WHERE run_id = %s AND op_id = %s", rid, op)[0][0]
            self.report.figures.setdefault("in doubt resolved", []).append(f"{rid} {op}: {n} effect(s)")
            cmd = ["resolve", rid, op, "--executed" if n else "--not-executed"]
            if n:
                cmd += ["--result", json.dumps({"resolved": "by the world"})]
            done = self.world.cli(*cmd, **self.env(len(WORKERS)))
            if done.returncode and "not waiting on an in-doubt" in done.stdout + done.stderr:
                continue  # cancelled (or resolved) since it was read: settle reads it again
            if done.returncode:
                self.report.violations.append(f"resolving {rid} {op}: {done.stdout}{done.stderr}"[:300])

    # -- the verdict -----------------------------------------------------------------------

    def check(self) -> None:
        """Every promise, from the world's tables and outlast's own records."""
        runs = {r[0]: r[1:] for r in self.sql("SELECT id, state, reason, fencing_token, parent_id FROM runs")}
        self.check_runs(runs)
        self.check_effects(runs)
        self.check_fencing(runs)
        self.check_messages()
        self.check_budgets()
        self.check_in_doubt()
        self.figures_of_faults()
        v = self.report.violations
        bad = asyncio.run(self.verify(list(runs)))
        if bad:
            v.append(f"journals that do not verify: {bad[:5]}")
        producers = [json.loads(p.read_text()) for p in sorted(self.tmp.glob("producer-*.json"))]
        self.report.figures["producers"] = producers
        if len(producers) < 2:
            v.append(f"only {len(producers)} producers reported (see logs/producer-*.log)")
        if "Traceback" in self.world.logs():
            v.append("Traceback in a worker log")

    def check_runs(self, runs: dict[str, tuple[Any, ...]]) -> None:
        """Every planned run recorded once, final; failed never; cancelled only when asked."""
        v = self.report.violations
        ids = self.planned()
        cancel = {p.run_id for k in range(2) for p in plan(self.seed, k, self.count) if p.cancel}
        states = Counter(s for s, *_ in runs.values())
        self.report.figures["runs by state"] = dict(states)
        if missing := [i for i in ids if i not in runs]:
            v.append(f"{len(missing)} planned runs never recorded, e.g. {missing[:3]}")
        stray = [i for i in runs if ":" not in i and i not in set(ids)]  # a child's id: parent:op
        if stray:
            v.append(
                f"{len(stray)} top-level runs nobody planned (an enqueue not idempotent?), e.g. {stray[:3]}"
            )
        for rid, (state, reason, _token, _parent) in runs.items():
            top = rid.split(":")[0]
            if state not in ("succeeded", "failed", "cancelled"):
                v.append(f"run {rid} stuck: {state}/{reason}")
            elif state == "failed" or (state == "cancelled" and top not in cancel):
                v.append(f"run {rid} {state}: {reason}")
        tokens = [t for _s, _r, t, _p in runs.values()]
        self.report.figures["runs claimed more than once"] = sum(1 for t in tokens if t > 1)
        self.report.figures["most claims of one run"] = max(tokens, default=0)

    def check_effects(self, runs: dict[str, tuple[Any, ...]]) -> None:
        """Idempotent and reconciled: one effect per operation done; plain: at most one, and one
        when its result was journaled; an approval decided once."""
        v = self.report.violations
        # Per operation: its tool (from the intention), whether a result was journaled.
        ops = self.sql(
            "SELECT i.run_id, i.op_id, i.body::jsonb->>'tool', bool_or(j.kind = 'result'), "
            "count(*) FILTER (WHERE j.kind = 'decision') FROM journal i "
            "JOIN journal j ON j.run_id = i.run_id AND j.op_id = i.op_id "
            "WHERE i.kind = 'intention' GROUP BY 1, 2, 3"
        )
        ledger = {
            (r, o): (n, t) for r, o, n, t in self.world_sql("SELECT run_id, op_id, calls, token FROM ledger")
        }
        effects: dict[tuple[str, str], int] = Counter()
        for r, o, n in self.world_sql("SELECT run_id, op_id, count(*) FROM effects GROUP BY 1, 2"):
            effects[(r, o)] = n
        for rid, op, tool, result, _d in ops:
            if tool == "transfer" and result and (rid, op) not in ledger:
                v.append(f"{rid} {op}: transfer journaled as done, no ledger row")
            if tool in ("notify", "audit"):
                if effects[(rid, op)] > 1:
                    v.append(f"{rid} {op}: {tool} has {effects[(rid, op)]} effects (a silent repeat)")
                elif result and effects[(rid, op)] == 0 and runs.get(rid, ("",))[0] == "succeeded":
                    v.append(f"{rid} {op}: {tool} journaled as done, no effect in the world")
        self.report.figures["transfers dispatched again (same key)"] = sum(
            1 for n, _t in ledger.values() if n > 1
        )
        decisions = self.sql(
            "SELECT run_id, op_id, count(*) FROM journal WHERE kind = 'decision' "
            "GROUP BY 1, 2 HAVING count(*) > 1"
        )
        if decisions:
            v.append(f"approvals decided more than once: {decisions[:3]}")

    def check_messages(self) -> None:
        """Messages are taken exactly once, in order (tests/nemesis/checks.py)."""
        chats = {
            p.run_id: int(p.input["each"])
            for k in range(2)
            for p in plan(self.seed, k, self.count)
            if p.workflow == "chat"
        }
        taken = self.world_sql("SELECT run_id, op_id, sender, n FROM taken")
        journaled = dict(self.sql("SELECT run_id, count(*) FROM journal WHERE kind = 'message' GROUP BY 1"))
        self.report.figures["chat runs, messages taken"] = (len(chats), len(taken))
        self.report.violations += checks.messages_taken(chats, taken, journaled)

    def check_budgets(self) -> None:
        """The budget spent equals the spend in the world: each budget's ``spent`` against the
        ledger's amounts of the runs that share it."""
        of = dict(self.sql("SELECT id, budget_id FROM runs WHERE budget_id IS NOT NULL"))
        spent = {b: float(x) for b, x in self.sql("SELECT budget_id, spent FROM budgets WHERE name = 'usd'")}
        paid: dict[str, float] = dict.fromkeys(spent, 0.0)
        for rid, amount in self.world_sql("SELECT run_id, amount FROM ledger"):
            if rid in of:
                paid[of[rid]] = paid.get(of[rid], 0.0) + amount
            else:
                self.report.violations.append(f"{rid}: a transfer in the ledger, its run has no budget")
        self.report.figures["budgets, usd spent"] = (len(spent), sum(spent.values()))
        self.report.violations += checks.budget_spent(spent, paid)

    def check_in_doubt(self) -> None:
        """Each in-doubt operation names the fault window(s) its doubt overlapped; none is a violation."""
        rows = self.sql(
            "SELECT d.run_id, d.op_id, min(i.created_at), min(d.created_at) FROM journal d "
            "JOIN journal i ON i.run_id = d.run_id AND i.op_id = d.op_id AND i.kind = 'intention' "
            "WHERE d.kind = 'in_doubt' GROUP BY 1, 2 ORDER BY 4"
        )
        doubts = [(r, o, i.timestamp(), d.timestamp()) for r, o, i, d in rows]
        lines, bad = checks.in_doubt_windows(doubts, self.report.windows, self.report.zero)
        self.report.figures["in doubt"] = lines
        self.report.violations += bad

    def figures_of_faults(self) -> None:
        """Takeover delays, the runs each kind of fault slowed, and the dashboard's probes."""
        self.takeovers.stop()
        self.report.figures["takeover delays"] = checks.delays(self.takeovers.delays)
        self.report.figures["held runs ended by their holder"] = self.takeovers.kept
        times = self.sql("SELECT created_at, finished_at FROM runs WHERE finished_at IS NOT NULL")
        spans = [(a.timestamp(), b.timestamp()) for a, b in times]
        self.report.figures["runs slowed, by fault"] = checks.slowed(spans, self.report.windows)
        d = self.dashboard
        if d is None:
            return
        d.stopping.set()
        d.thread.join(10)
        failed = [(at, why) for at, why in d.probes if why]
        self.report.figures["dashboard probes, failed, started"] = (len(d.probes), len(failed), d.started)
        if failed:
            windows = self.report.windows
            self.report.figures["dashboard failures, by why and window"] = Counter(
                f"{why} in {', '.join(w.kind for w in checks.windows_over(windows, at, at)) or 'none'}"
                for at, why in failed
            )
        if not d.recovered(30.0):
            self.report.violations.append("the dashboard answered no probe in 30 s once the faults healed")

    def check_fencing(self, runs: dict[str, tuple[Any, ...]]) -> None:
        """Within a run, no effect lands with an older token than one before it (two owners
        writing after a takeover), nor with a token newer than the run's."""
        self.watch()
        for rid, token in self.fence_last.items():
            if rid in runs and token > runs[rid][2]:
                self.report.violations.append(
                    f"{rid}: an effect with token {token}, newer than the run's {runs[rid][2]}"
                )

    def watch(self) -> None:
        """Continuously (after every fault's beginning and end), the effects written since the last
        look: none with an older fencing token than an earlier effect of its run."""
        rows = self.world_sql(
            "SELECT id, run_id, token FROM effects WHERE id > %s ORDER BY id", self.fence_seen
        )
        for eid, rid, token in rows:
            if token < self.fence_last.get(rid, 0):
                self.report.violations.append(
                    f"{rid}: effect {eid} with token {token} after one with {self.fence_last[rid]} "
                    "(two owners)"
                )
            self.fence_last[rid] = max(token, self.fence_last.get(rid, 0))
            self.fence_seen = eid

    async def verify(self, ids: list[str]) -> list[tuple[str, int]]:
        s = Settings(
            database_url=self.url(self.pg_port()),
            redis_url=self.rd.url,
            schema="outlast",
            prefix=self.world.prefix,
        )
        async with AsyncClient(settings=s) as c:
            bad = []
            for rid in ids:
                crossing = await c.verify(rid)
                if crossing is not None:
                    bad.append((rid, crossing))
            return bad

    def keep(self, into: Path) -> Path:
        """The logs and the journal, kept in one folder after a violation."""
        into.mkdir(parents=True, exist_ok=True)
        shutil.copytree(self.tmp, into / "logs", dirs_exist_ok=True)
        with contextlib.suppress(Exception):
            rows = self.sql(
                "SELECT run_id, seq, kind, op_id, body, created_at::text FROM journal ORDER BY 1, 2"
            )
            (into / "journal.json").write_text(json.dumps(rows, default=str))
            runs = self.sql("SELECT id, state, reason, fencing_token, owner, parent_id FROM runs")
            (into / "runs.json").write_text(json.dumps(runs, default=str))
        (into / "report.json").write_text(json.dumps(self.report.__dict__, default=str, indent=1))
        return into

    def destroy(self) -> None:
        self.takeovers.stop()
        if self.dashboard is not None:
            self.dashboard.stop()
        for w in range(len(WORKERS)):
            self.signal(w, signal.SIGCONT)
            self.signal(w, signal.SIGKILL)
        for p in self.producers:
            with contextlib.suppress(Exception):
                p.kill()
                p.wait(10)
        self.world.stop_all()  # every worker process ever started, reaped
        with contextlib.suppress(Exception):
            self.links.close()
        self.pair.destroy()
        self.rd.stop(signal.SIGKILL)
        with contextlib.suppress(Exception):
            with psycopg.connect(self.world_url, autocommit=True) as c:
                c.execute(f'DROP SCHEMA IF EXISTS "{self.world_schema}" CASCADE'.encode())
