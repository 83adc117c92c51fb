"""What ``outlast health``, ``workers``, ``queues`` and ``dead-letters`` show and do. Everything
is read from Postgres, the one source of truth, except what only Redis knows: a queue's stream
figures and its dead letters. A dead letter is requeued through Postgres first."""

from __future__ import annotations

import re
from dataclasses import asdict
from typing import Any, Literal

from outlast.errors import SchemaError, ServiceUnavailable
from outlast.producer import AsyncClient
from outlast.queue import run_id_problem
from outlast.store import SCHEMA_VERSION

_ENTRY_ID = re.compile(r"(\d{1,20})-(\d{1,20})")


def is_entry_id(text: str) -> bool:
    """A stream entry's id as Redis writes it: two unsigned 64-bit numbers, ``ms-seq``."""
    m = _ENTRY_ID.fullmatch(text)
    return m is not None and all(int(part) < 2**64 for part in m.groups())


Outcome = Literal["requeued", "dropped", "kept"]


async def health(client: AsyncClient, worker: bool) -> tuple[list[str], list[str]]:
    """Check that Postgres answers, the schema is current, Redis answers and (``worker``) a live
    worker heartbeat exists. Returns what is fine and what is wrong (healthy: nothing wrong)."""
    fine: list[str] = []
    wrong: list[str] = []
    schema_ok = False
    try:
        await client.store.open(check=False)
        fine.append("postgres answers")
        await client.store.check_schema()
        fine.append(f"schema '{client.settings.schema}' at version {SCHEMA_VERSION}")
        schema_ok = True
    except (ServiceUnavailable, SchemaError) as exc:
        wrong.append(str(exc))
    try:
        await client.queue.ping()
        fine.append("redis answers")
    except ServiceUnavailable as exc:
        wrong.append(str(exc))
    if worker and schema_ok:
        live = [w for w in await client.store.workers() if w["live"]]
        if live:
            fine.append(f"{len(live)} live worker(s)")
        else:
            wrong.append("no live worker (no heartbeat within three lease TTLs); start one: outlast worker")
    return fine, wrong


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = float(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f}{unit}"
    return f"{seconds:.1f}s"


def render_workers(rows: list[dict[str, Any]]) -> str:
    """The heartbeat records, one line each, for a person to read."""
    if not rows:
        return "no workers"
    lines = [
        f"{'NAME':<32} {'STATUS':<6} {'HOST':<16} {'PID':>7} {'RUNS':>9} {'THREADS':>9}  LAST BEAT  QUEUES"
    ]
    for w in rows:
        runs = f"{w['runs_held']}/{w['concurrency']}"
        threads = f"{w['tool_threads_busy']}/{w['tool_threads']}"  # busy / alive: sync tools' threads
        lines.append(
            f"{w['name']:<32} {'live' if w['live'] else 'gone':<6} {w['host'][:16]:<16} {w['pid']:>7} "
            f"{runs:>9} {threads:>9}  {_age(w['beat_age']) + ' ago':<9}  {','.join(w['queues'])}"
        )
        programs = " ".join(f"{k}={v}" for k, v in sorted(w["programs"].items()))
        lines.append(f"  started {w['started_at']:%Y-%m-%d %H:%M:%S}  programs {programs or '-'}")
    return "\n".join(lines)


async def queues(client: AsyncClient, names: list[str]) -> list[dict[str, Any]]:
    """Each queue's figures: from Redis, its stream (length, pending, oldest pending age, dead
    letters); from Postgres, its unfinished runs by state. Without ``names``: every queue that
    has unfinished runs or a worker's heartbeat record, and the configured one."""
    await client.open()
    unfinished = await client.store.unfinished_by_queue()
    if not names:
        served = {q for w in await client.store.workers() for q in w["queues"]}
        names = sorted({*unfinished, *served, client.settings.queue})
    out = []
    for name in names:
        figures = asdict(await client.queue.figures(name))
        out.append({**figures, "runs": unfinished.get(name, {})})
    return out


def render_queues(rows: list[dict[str, Any]]) -> str:
    lines = [f"{'QUEUE':<20} {'LENGTH':>7} {'PENDING':>7} {'OLDEST':>8} {'DEAD':>6}  UNFINISHED RUNS"]
    for q in rows:
        runs = ", ".join(f"{state} {n}" for state, n in sorted(q["runs"].items())) or "-"
        lines.append(
            f"{q['queue']:<20} {q['length']:>7} {q['pending']:>7} {_age(q['oldest_pending_age']):>8} "
            f"{q['dead_letters']:>6}  {runs}"
        )
    return "\n".join(lines)


async def requeue(client: AsyncClient, queue: str, letter: dict[str, str]) -> tuple[Outcome, str]:
    """Requeue one dead letter of ``queue``, Postgres first: a run that is not final is stamped
    as published (with a 'requeued' event), then published on its own queue and the letter
    dropped; for a final run the letter is only dropped; a letter naming no run is kept."""
    entry = letter["_id"]
    run_id = letter.get("run")
    problem = "entry is not UTF-8" if "_raw" in letter else run_id_problem(run_id)
    if problem is not None or run_id is None:
        return "kept", f"dead letter {entry}: {problem}: nothing to requeue (remove it: --drop {entry})"
    detail = {"dead_letter": entry, "queue": queue, "reason": letter.get("_reason")}
    where = await client.store.requeue_dead_letter(run_id, detail)
    if where is None:
        run = await client.store.get_run(run_id)
        if run is None:
            return "kept", (
                f"dead letter {entry}: no run '{run_id}' in Postgres: nothing to requeue "
                f"(remove it: --drop {entry})"
            )
        await client.queue.drop_dead_letter(queue, entry)
        return "dropped", f"dead letter {entry}: run '{run_id}' is {run.state}: dropped, nothing requeued"
    run_queue, state, priority = where
    await client.queue.publish(run_queue, run_id, priority=priority)
    await client.queue.drop_dead_letter(queue, entry)
    return "requeued", f"dead letter {entry}: run '{run_id}' ({state}) requeued on queue '{run_queue}'"
