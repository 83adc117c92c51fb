"""Upgrading outlast with runs in flight: the previous version's code (the newest commit on this
branch's first-parent line whose schema is older, extracted with ``git archive``) migrates the
schema to its version and serves a steady load with two workers; this code's ``outlast migrate``
applies the newer migrations while they run; two workers of this code start beside them; the old
ones get SIGTERM (a rolling upgrade), and runs they held go on in the new ones. Every run succeeds,
and the world counts what the gap table promises: one receipt per operation of an idempotent tool
(dispatched again with the same key when a hand-over cut it off), one effect per operation of a
reconciled one.

The previous version checks the schema only when a process starts, and refuses any newer one: its
running workers serve on, but one (re)started after the migration refuses to start; the test checks
that too. Code from this version on reads the compatibility the database records (``oldest_code``)
and starts on a newer schema that only expanded (docs/upgrading.md;
``tests/integration/test_migrations.py``).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import tarfile
import time
from io import BytesIO
from pathlib import Path

import pytest

from outlast.store import SCHEMA_VERSION
from outlast.store.steps import MIGRATIONS
from tests.conftest import ROOT, drop_schemas, wait_for
from tests.faults import APP, FaultWorld, enqueue_many

pytestmark = pytest.mark.crash

RUNS = 120  # per producer: the old one before and while the schema is migrated, the new one after
SECONDS = 0.3  # each of the 5 operations of a run: a run lasts about 1.5 s, longer than the grace
MIGRATIONS_DIR = "outlast/store/migrations"

PRODUCER = f"""
import sys, time
from outlast import Client
n, rate, kinds = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3].split(",")
with Client.from_env() as c:
    for i in range(n):
        run = c.enqueue("chain", {{"tool": kinds[i % len(kinds)], "n": 5, "seconds": {SECONDS}}})
        print("run", run.id, flush=True)
        time.sleep(1 / rate)
"""


def git(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, timeout=60)


def previous_version() -> tuple[str, int]:
    """The newest commit on the first-parent line whose schema is older than this code's, and the
    version it knows; the test is skipped, saying why, without git history to find one."""
    listed = git("rev-list", "--first-parent", "-n", "200", "HEAD")
    if listed.returncode:
        pytest.skip(f"no git history at {ROOT}: {listed.stderr.decode().strip()[:200]}")
    for commit in listed.stdout.decode().split():
        files = git("ls-tree", "--name-only", f"{commit}:{MIGRATIONS_DIR}").stdout.decode().split()
        known = len([f for f in files if f.endswith(".sql")])
        if 0 < known < SCHEMA_VERSION:
            return commit, known
    pytest.skip(f"no commit among the last 200 of HEAD has a schema older than {SCHEMA_VERSION}")


def extract(commit: str, into: Path) -> Path:
    archive = git("archive", "--format=tar", commit)
    assert archive.returncode == 0, archive.stderr.decode()
    with tarfile.open(fileobj=BytesIO(archive.stdout)) as tar:
        tar.extractall(into, filter="data")
    return into


class OldCode:
    """Processes of the previous version's code: ``python -m outlast`` with its tree first on the
    path (and as the working directory: ``-m`` puts that first)."""

    def __init__(self, fw: FaultWorld, tree: Path) -> None:
        self.fw, self.tree = fw, tree

    def env(self, **extra: str) -> dict[str, str]:
        return self.fw.env(PYTHONPATH=str(self.tree), **extra)

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, *args], env=self.env(), cwd=self.tree, capture_output=True, text=True,
            timeout=120,
        )  # fmt: skip

    def popen(self, log: str, *args: str, **env: str) -> subprocess.Popen[bytes]:
        with open(self.fw.tmp / log, "wb") as out:
            p = subprocess.Popen(
                [sys.executable, *args], env=self.env(**env), cwd=self.tree, stdout=out,
                stderr=subprocess.STDOUT,
            )  # fmt: skip
        self.fw.procs.append(p)
        return p

    def worker(self, name: str) -> subprocess.Popen[bytes]:
        args = ("-m", "outlast", "worker", APP, "-c", "16")
        return self.popen(f"worker-{name}.log", *args, OUTLAST_WORKER_NAME=name)


def succeeded(fw: FaultWorld) -> int:
    return int(fw.sql("SELECT count(*) FROM runs WHERE state = 'succeeded'")[0][0])


@pytest.mark.timeout(400)
def test_a_rolling_upgrade_under_load_loses_no_run(fw: FaultWorld, tmp_path: Path) -> None:
    commit, old_version = previous_version()
    old = OldCode(fw, extract(commit, tmp_path / "old"))
    where = old.run("-c", "import outlast; print(outlast.__file__)")
    assert where.stdout.strip().startswith(str(old.tree)), (where.stdout, where.stderr)
    newer = MIGRATIONS[old_version:]
    contract = [m.name for m in newer if not m.expand]
    print(f"\nprevious version: {commit[:10]} (schema {old_version}); this code: {SCHEMA_VERSION}")

    # The previous version's schema, made by its own outlast migrate.
    drop_schemas(fw.database_url, fw.schema)
    made = old.run("-m", "outlast", "migrate")
    assert made.returncode == 0, made.stdout + made.stderr
    assert fw.sql("SELECT value FROM outlast_meta WHERE key = 'schema_version'") == [(str(old_version),)]

    olds = [old.worker(f"old-{k}") for k in range(2)]
    producer = old.popen(
        "producer-old.txt", "-c", PRODUCER, str(RUNS), "10", "receipt,reconciled"
    )  # steady: 10 runs a second, before and while the schema is migrated
    wait_for(lambda: succeeded(fw) >= 20, 120, 0.2, "the old workers to serve 20 runs")

    if contract:  # expand-then-contract: a contract waits for the older workers to be gone
        refused = fw.cli("migrate")
        assert refused.returncode != 0 and "contracts the schema" in refused.stderr, refused.stderr
        pytest.skip(f"{contract} contract the schema: no rolling upgrade from {old_version}, by design")

    began = time.monotonic()
    migrated = fw.cli("migrate")  # this code, while the old workers run
    took = time.monotonic() - began
    assert migrated.returncode == 0, migrated.stdout + migrated.stderr
    assert f"at version {SCHEMA_VERSION}" in migrated.stdout
    waits = migrated.stderr.count("schema.lock_wait") + migrated.stdout.count("schema.lock_wait")
    print(f"migrated {old_version} -> {SCHEMA_VERSION} under load in {took:.1f}s ({waits} lock waits)")

    # The old workers serve on, on the newer schema.
    done = succeeded(fw)
    wait_for(lambda: succeeded(fw) >= done + 20, 120, 0.2, "20 more runs served on the new schema")
    # A worker of the previous version (re)started now: it checks the schema at start.
    late = old.worker("old-late")
    if "oldest_code" in (old.tree / "outlast/store/migrate.py").read_text():
        time.sleep(3)
        assert late.poll() is None, "a worker of the previous version refused an expanded schema"
    else:
        assert late.wait(60) != 0
        log = (fw.tmp / "worker-old-late.log").read_text()
        assert "newer than this outlast knows" in log, log[-2000:]
        (fw.tmp / "worker-old-late.log").rename(fw.tmp / "refused-old-late.txt")  # its traceback is expected

    # The rolling upgrade: new workers beside the old ones, new producers, then the old ones go.
    news = [fw.start(f"new-{k}", "-c", "16") for k in range(2)]
    live_new = "SELECT count(*) FROM worker_code WHERE code_version = %s AND name LIKE 'new-%%'"
    wait_for(lambda: fw.sql(live_new, SCHEMA_VERSION)[0][0] == 2, 60, 0.2, "the new workers' heartbeats")
    assert producer.wait(120) == 0
    lines = (fw.tmp / "producer-old.txt").read_text().splitlines()
    first = [line.split()[1] for line in lines if line.startswith("run ")]
    inputs = [{"tool": ("receipt", "reconciled")[i % 2], "n": 5, "seconds": SECONDS} for i in range(RUNS)]
    second = enqueue_many(fw, "chain", inputs)
    held = {p.pid: int(fw.sql("SELECT count(*) FROM runs WHERE owner = %s AND state = 'running'", n)[0][0])
            for p, n in zip(olds, ["old-0", "old-1"], strict=True)}  # fmt: skip
    for p in olds:
        p.send_signal(signal.SIGTERM)
    for p in olds:
        assert p.wait(30) == 0
    print(f"runs held by the old workers at SIGTERM: {held}")
    ids = first + second
    assert len(ids) == 2 * RUNS
    fw.wait_settled(ids, timeout=240)
    assert all(p.poll() is None for p in news)

    # Every run succeeded; the world counts one effect per operation, as the gap table says.
    states = fw.states()
    assert states == {"succeeded": 2 * RUNS}, states
    tools = dict(fw.sql("SELECT id, input->>'tool' FROM runs"))
    receipts = fw.effects_sql("SELECT run_id, op_id, calls FROM receipts")
    effects = fw.effects_sql("SELECT run_id, op_id, count(*), array_agg(pid) FROM effects GROUP BY 1, 2")
    ops = {f"op-{k}" for k in range(1, 6)}
    want_receipts = {(r, op) for r, tool in tools.items() if tool == "receipt" for op in ops}
    want_effects = {(r, op) for r, tool in tools.items() if tool == "reconciled" for op in ops}
    assert {(r, op) for r, op, _ in receipts} == want_receipts
    assert {(r, op) for r, op, _, _ in effects} == want_effects
    repeated = [(r, op, n) for r, op, n, _ in effects if n != 1]
    assert repeated == [], f"reconciled operations with more than one effect: {repeated[:5]}"
    again = sum(1 for *_, calls in receipts if calls > 1)
    # Some runs began in an old worker and ended in a new one (the hand-over crossed versions).
    old_pids = {p.pid for p in olds}
    by_run: dict[str, set[bool]] = {}
    for r, _op, _n, pids in effects:
        by_run.setdefault(r, set()).update(pid in old_pids for pid in pids)
    crossed = sum(1 for seen in by_run.values() if seen == {True, False})
    print(
        f"{2 * RUNS} runs succeeded; receipts {len(receipts)} (dispatched again with the same key: {again}); "
        f"reconciled effects {len(effects)}; runs that crossed from old to new code: {crossed}"
    )
    assert crossed or sum(held.values()) == 0, "runs were held at SIGTERM, yet none crossed to new code"
    assert "Traceback" not in fw.logs(), fw.log_lines("Traceback", 2)
