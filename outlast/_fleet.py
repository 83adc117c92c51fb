"""This module says how ``outlast workers``, ``queues`` and ``fleet`` show the fleet to a person,
the way out of each kind of parked run, and what a dead letter's id looks like. The figures
themselves come from the client (``AsyncClient.health``, ``workers``, ``queues``, ``parked``,
``dead_letters``, ``requeue_dead_letter``)."""

from __future__ import annotations

import re
from typing import Any

_ENTRY_ID = re.compile(r"(\d{1,20})-(\d{1,20})")


def is_entry_id(text: str) -> bool:
    """A stream entry's id as Redis writes it: two unsigned 64-bit numbers, ``ms-seq``."""
    m = _ENTRY_ID.fullmatch(text)
    return m is not None and all(int(part) < 2**64 for part in m.groups())


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
        # The schema version its code knows: in a rolling upgrade, which workers still run old code.
        code = "before 22" if w.get("code_version") is None else w["code_version"]
        started = f"{w['started_at']:%Y-%m-%d %H:%M:%S}"
        lines.append(f"  started {started}  code for schema {code}  programs {programs or '-'}")
    return "\n".join(lines)


def render_queues(rows: list[dict[str, Any]]) -> str:
    lines = [f"{'QUEUE':<20} {'LENGTH':>7} {'PENDING':>7} {'OLDEST':>8} {'DEAD':>6}  UNFINISHED RUNS"]
    for q in rows:
        runs = ", ".join(f"{state} {n}" for state, n in sorted(q["runs"].items())) or "-"
        lines.append(
            f"{q['queue']:<20} {q['length']:>7} {q['pending']:>7} {_age(q['oldest_pending_age']):>8} "
            f"{q['dead_letters']:>6}  {runs}"
        )
    return "\n".join(lines)


# What takes a workflow's parked runs forward, by the reason they wait (docs/recovering.md).
_WAYS_OUT = {
    "workflow_error": "deploy a fix (its workers move them), or: outlast resume --workflow {w}",
    "program_changed": "start a worker of their program, or: outlast resume --workflow {w}",
    "resume_impossible": "deploy code whose replay agrees, then: outlast resume --workflow {w}",
    "paused": "outlast pauses (who paused them, and why), then: outlast unpause",
}


def way_out(workflow: str, reason: str) -> str:
    """The command (or act) that takes a workflow's runs parked for ``reason`` forward."""
    return _WAYS_OUT.get(reason, "outlast resume --workflow {w}").format(w=workflow)


def render_parked(rows: list[dict[str, Any]]) -> str:
    """The parked runs per workflow and reason, each with its way out."""
    if not rows:
        return "no parked runs"
    lines = [f"{'WORKFLOW':<24} {'REASON':<18} {'RUNS':>6}  WAY OUT"]
    for p in rows:
        lines.append(f"{p['workflow']:<24} {p['reason']:<18} {p['runs']:>6}  {p['way_out']}")
    return "\n".join(lines)
