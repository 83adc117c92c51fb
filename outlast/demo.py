"""``outlast demo`` shows a payment whose worker dies in the middle of the transfer, taken over by a
fresh worker, and the bank's own ledger showing exactly one transfer.

It runs on the embedded default (or the configured servers) in a schema and a key prefix of its
own (``<schema>_demo``, ``<prefix>:demo``), reset at each start, so it never touches a user's runs.
The workers are real processes (``python -m outlast worker outlast.demo_app:app``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import redis.asyncio as aioredis
from psycopg import sql

from outlast import demo_app
from outlast._status import describe
from outlast.errors import DemoFailed, OutlastError
from outlast.producer import AsyncClient
from outlast.services import resolve
from outlast.settings import Settings

LEASE = 2.0  # seconds: how long a dead worker's run stays locked before another may take it
STEP_TIMEOUT = 20.0
# How the story tells each way a gap is resolved (a ``gap.resolved`` line's ``how``).
GAP_WORDS = {
    "read: redone": "a read, redone",
    "idempotent: same key": "dispatched again with the same idempotency key",
    "reconciler: not executed": "reconciler says not executed; executing it now",
    "reconciler: executed": "reconciler says executed; its result is journaled",
}


def say(line: str = "") -> None:
    print(line, flush=True)


class WorkerProcess:
    """A real worker process; its JSON log lines are collected as they come."""

    def __init__(self, name: str, proc: asyncio.subprocess.Process) -> None:
        self.name = name
        self.proc = proc
        self.events: list[dict[str, Any]] = []
        self._reader = asyncio.create_task(self._read())

    @classmethod
    async def start(
        cls, name: str, settings: Settings, failpoints: str = "", app: str = "outlast.demo_app:app"
    ) -> WorkerProcess:
        env = {k: v for k, v in os.environ.items() if not k.startswith("OUTLAST_")}
        package_root = str(Path(__file__).resolve().parents[1])
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
        assert settings.database_url and settings.redis_url
        env.update(
            OUTLAST_DATABASE_URL=settings.database_url,
            OUTLAST_REDIS_URL=settings.redis_url,
            OUTLAST_SCHEMA=settings.schema,
            OUTLAST_PREFIX=settings.prefix,
            OUTLAST_WORKER_NAME=name,
            OUTLAST_LEASE_TTL=str(LEASE),
            OUTLAST_GRACE="1",
            OUTLAST_SWEEP_INTERVAL="0.5",
            OUTLAST_REPUBLISH_AFTER="1",
            OUTLAST_LOG_FORMAT="json",
            OUTLAST_FAILPOINTS=failpoints,
        )
        proc = await asyncio.create_subprocess_exec(
            *(sys.executable, "-m", "outlast", "worker", app),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            env=env,
        )
        return cls(name, proc)

    async def _read(self) -> None:
        assert self.proc.stderr is not None
        async for raw in self.proc.stderr:
            line = raw.decode(errors="replace").rstrip()
            try:
                event = json.loads(line)
            except ValueError:
                event = {"event": line}
            if isinstance(event, dict) and isinstance(event.get("event"), str):
                self.events.append(event)

    def last_words(self) -> str:
        return self.events[-1]["event"].strip() if self.events else "(it printed nothing)"

    async def wait_for(self, pred: Callable[[dict[str, Any]], bool], what: str) -> dict[str, Any]:
        """The first log line matching ``pred``; fails if the worker exits or time runs out."""
        until = time.monotonic() + STEP_TIMEOUT
        while True:
            for e in self.events:
                if pred(e):
                    return e
            if self.proc.returncode is not None and self._reader.done():
                raise DemoFailed(
                    f"worker {self.name} exited (code {self.proc.returncode}) before {what}: "
                    f"{self.last_words()}"
                )
            if time.monotonic() > until:
                raise DemoFailed(f"worker {self.name}: no {what} after {STEP_TIMEOUT:.0f}s")
            await asyncio.sleep(0.05)

    async def stop(self) -> None:
        """SIGTERM, then SIGKILL if it lingers."""
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.proc.wait(), 5)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    self.proc.kill()
                await self.proc.wait()
        await asyncio.gather(self._reader, return_exceptions=True)


async def _reset(s: Settings, bank: str) -> None:
    """A clean story: the demo's own schema, keys and bank, emptied and made again."""
    assert s.database_url and s.redis_url
    with psycopg.connect(s.database_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(s.schema)))
    r = aioredis.from_url(s.redis_url)
    try:
        keys = [k async for k in r.scan_iter(match=f"{s.prefix}:*")]
        if keys:
            await r.delete(*keys)
    finally:
        await r.aclose()
    client = AsyncClient(settings=s)
    try:
        await client.migrate()
    finally:
        await client.close()
    demo_app.reset_bank(s.database_url, bank)


async def _final(client: AsyncClient, run_id: str, worker: WorkerProcess) -> dict[str, Any]:
    """Wait for the run to end, and for the worker's line saying so."""
    said = f"the end of run {run_id}"
    line = await worker.wait_for(lambda e: e["event"] == "run.finished" and e.get("run_id") == run_id, said)
    run = await client.status(run_id)
    if run.state != "succeeded":
        raise DemoFailed(f"run {run_id} ended {run.state}, not succeeded: {run.reason or line.get('reason')}")
    result: dict[str, Any] = run.result
    return result


async def _story(settings: Settings, t0: float) -> None:
    task = asyncio.current_task()
    assert task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)  # stop workers too
    s, note = resolve(settings)
    if note:
        say(note)
    s = s.with_(schema=f"{s.schema}_demo", prefix=f"{s.prefix}:demo")
    assert s.database_url
    bank = demo_app.bank_schema(s.schema)
    await _reset(s, bank)
    say("\nThe workflow 'payments' does three things:")
    say("  transfer  moves money at a small bank that honours idempotency keys (idempotent=True)")
    say("  audit     writes a log line: a plain side effect")
    say("  notify    sends a message; a reconciler can ask the outbox whether it was sent")
    workers: list[WorkerProcess] = []
    async with AsyncClient(settings=s, app=demo_app.app) as client:
        try:
            run_id = await _tell(client, s, bank, workers)
        finally:
            for w in workers:
                await w.stop()
    say(f"\nDone in {time.monotonic() - t0:.1f}s. Look closer (read only):")
    say(f"  outlast --schema {s.schema} status {run_id}")


def _told(e: dict[str, Any]) -> str:
    """A takeover's log line, told as the story tells it ("" for a line it leaves out)."""
    event, op = e["event"], f"{e.get('tool')} ({e.get('operation_id')})"
    if event == "run.resumed":
        return f"↻ resuming run {e['run_id']}: {e['entries']} journaled entries re-derived with no effect"
    if event == "operation.unresolved":
        return f"  intention without result: {op[:-1]}, key {e['idempotency_key']}): to resolve"
    if event == "gap.resolved":
        said = GAP_WORDS.get(str(e.get("how")), str(e.get("how")))
        return f"{'✓' if e.get('how') == 'reconciler: executed' else '↻'} {op}: {said}"
    if event == "operation.in_doubt":
        return f"? {op}: in doubt, not executed again ({e.get('why')})"
    return ""


async def _show_gap(client: AsyncClient, s: Settings, bank: str, run_id: str) -> None:
    """What outlast and the bank know right after the crash."""
    assert s.database_url
    info = await describe(client, run_id)
    n, state = info["chain"]["entries"], info["run"]["state"]
    chain = "verifies" if info["chain"]["verifies"] else "ALTERED"
    say(f"   outlast status: still '{state}' under demo-1's lease (expires within {LEASE:.0f}s);")
    say(f"     journal: {n} entr{'y' if n == 1 else 'ies'}, hash chain {chain}")
    for op in info["pending"]:
        say(f"     pending: {op['tool']} ({op['operation']}): an intention without a result")
    rows = demo_app.ledger(s.database_url, bank, run_id)
    say(f"   The bank's ledger already has {len(rows)} transfer(s) for this run.")


async def _tell(client: AsyncClient, s: Settings, bank: str, workers: list[WorkerProcess]) -> str:
    assert s.database_url
    run = await client.enqueue("payments", {"amount": 120, "to": "alice"})
    say(f"\n1. Enqueued run {run.id}: pay 120 EUR to alice.")
    say("2. Started worker demo-1, armed to die right after the bank executes the transfer.")
    workers.append(first := await WorkerProcess.start("demo-1", s, failpoints="after_effect:transfer"))
    await first.wait_for(lambda e: "failpoint after_effect:transfer hit" in e["event"], "the planned crash")
    await asyncio.wait_for(first.proc.wait(), STEP_TIMEOUT)
    say("   ✗ demo-1 died (SIGKILL) after the bank executed the transfer, before outlast recorded")
    say("     the result. For all outlast knows, the money may or may not have moved.")
    await _show_gap(client, s, bank, run.id)

    say("3. Started worker demo-2 (no failpoint). It takes the run over once the lease expires:")
    t = time.monotonic()
    workers.append(second := await WorkerProcess.start("demo-2", s))
    result = await _final(client, run.id, second)
    for e in second.events:
        line = _told(e)
        if line:
            say(f"     {line}")
    took, paid = time.monotonic() - t, f"{result['amount']} EUR to {result['to']}"
    say(f"   run {run.id} succeeded after {took:.1f}s: {paid}, receipt {result['receipt']}, notified")

    say("4. Two more payments, no crash: transfer, audit, notify, once each.")
    more = [
        await client.enqueue("payments", {"amount": a, "to": to}) for a, to in ((35, "bob"), (8, "carol"))
    ]
    for r in more:
        res = await _final(client, r.id, second)
        say(f"   run {r.id} succeeded: {res['amount']} EUR to {res['to']}, receipt {res['receipt']}")

    rows = demo_app.ledger(s.database_url, bank, run.id)
    say(f"5. The bank's own ledger for run {run.id}:")
    for row in rows:
        key, times = row["idempotency_key"], row["requests"]
        say(
            f"     R-{row['id']:04d}  {row['amount']} EUR to {row['to_account']}  key {key}  (asked {times}x)"
        )
    if len(rows) != 1:
        raise DemoFailed(f"the bank has {len(rows)} transfers for run {run.id}, expected exactly one")
    say("   Exactly one transfer: the bank saw the same idempotency key twice and moved the money once.")
    return run.id


def main(settings: Settings) -> None:
    """Tell the story; on any failure, one line and a non-zero exit (workers are stopped)."""
    t0 = time.monotonic()
    say("outlast demo: a payment whose worker dies in the middle of the transfer")
    try:
        asyncio.run(_story(settings, t0))
    except OutlastError:
        raise
    except asyncio.CancelledError:
        raise DemoFailed("stopped by SIGTERM (its workers were stopped)") from None
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise DemoFailed(f"the demo stopped: {type(exc).__name__}: {first}") from None
