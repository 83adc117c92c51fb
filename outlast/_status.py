"""``outlast status`` shows a run's state and reason, the chain, pending and in-doubt operations,
and resolutions — read without resuming anything."""

from __future__ import annotations

import json
import re
from typing import Any

from outlast._captured import requests, shown_data
from outlast._journal import Entry, first_bad_crossing, operation_state
from outlast.producer import AsyncClient

CHILDREN_SHOWN = 200  # the child runs a status lists at most (and the dashboard's tree holds)


async def describe(
    client: AsyncClient, run_id: str, generation: int | None = None, shown: str | None = None
) -> dict[str, Any]:
    """A run's status as plain data (what ``status --json`` prints), its journal's current
    generation shown, or ``generation`` (an earlier one, kept until pruned). Of the requests its
    operations captured, the one of operation ``shown`` (the last one by default) is whole, the others named:
    a long agent's status is the size of one request, not of every growing history."""
    run = await client.status(run_id)
    entries, head = await client.chain(run_id, generation)
    bad = first_bad_crossing(entries, head)
    history: dict[str, list[Entry]] = {}
    for e in entries:
        if e.op_id is not None and bad is None:
            history.setdefault(e.op_id, []).append(e)
    pending, in_doubt, resolutions, captures = [], [], [], []
    whole = requests(entries) if bad is None else {}  # each capture's request rebuilt whole
    for op, ops in history.items():
        captured = [e for e in ops if e.kind == "capture"]
        if captured:  # the last request the operation sent (a re-dispatch's replaces the first)
            captures.append({"operation": op, **_body(captured[-1], whole)})
        intent = next((e.data for e in ops if e.kind == "intention"), None)
        if intent is None:
            continue
        item = {"operation": op, "tool": intent["tool"], "args": intent["args"], "key": intent["key"]}
        state, last = operation_state(ops)
        if state == "in_doubt" and last is not None:
            in_doubt.append({**item, "why": last.data["why"]})
        elif state in ("pending", "cleared"):
            pending.append(item)
        for e in ops:
            if e.kind == "resolution" or (e.kind == "result" and "how" in e.data):
                kept = {k: v for k, v in e.data.items() if k in ("executed", "who", "comment")}
                resolutions.append({**item, "how": e.data["how"], **kept})
    approvals = [
        {
            k: a[k]
            for k in (
                "op_id",
                "action",
                "args",
                "args_hash",
                "approvers",
                "authenticated",
                "expires_at",
                "expired",
                "status",
                "decided_by",
                "decided_by_detail",
                "decided_at",
                "comment",
                "new_args",
            )
        }
        for a in await client.approvals(run_id)
    ]
    budget = await client.budget(run_id)
    untaken = [
        {k: m[k] for k in ("message_id", "channel", "seq", "created_at", "via", "set_aside")}
        for m in await client.messages(run_id)
        if m["taken_seq"] is None
    ]
    children = await client.children(run_id, CHILDREN_SHOWN + 1)
    events = await client.events(run_id)
    size = await client.size(run_id)
    artifacts = await client.artifacts(run_id)
    now = _now(run.state, run.reason, events)
    return {
        "run": run.to_dict(),
        "message": _why(run.reason, now, approvals),
        "paused": [] if run.final else await client.pause_of(run_id),  # the pauses that hold it
        "forks": [
            {"kind": e["kind"], **e["detail"]} for e in events if e["kind"] in ("forked", "forked_from")
        ],
        "first": now.get("waits", []) if run.reason == "first" else [],  # each wait, and its due time
        "waits_for": _throttled(run.state, events),
        "chain": {
            "head": head,
            "entries": len(entries),
            "verifies": bad is None,
            "bad": bad,
            "generation": run.generation if generation is None else generation,  # the one shown
            "current": run.generation,  # the run's: how often it carried forward
        },
        "artifacts": artifacts,  # the files the run saved (the bytes: client.artifact)
        "size": size,  # stored bytes, by part, and the run's journaled count (OUTLAST_RUN_SIZE_WARN)
        "pending": pending,
        "in_doubt": in_doubt,
        "resolutions": resolutions,
        "approvals": approvals,
        "messages": untaken,  # sent, not taken (yet), or set aside (why: the run cannot take it)
        "captures": chosen(captures, shown),
        "budget": [{k: float(v) if k != "name" else v for k, v in b.items()} for b in budget],
        "children": sorted(children[:CHILDREN_SHOWN], key=lambda c: _numeric(c["id"])),  # the first started
        "children_truncated": len(children) > CHILDREN_SHOWN,  # more than these were started
    }


def chosen(captures: list[dict[str, Any]], op: str | None) -> list[dict[str, Any]]:
    """Each capture, whole for ``op`` (the last one if None), the others named: their operation,
    tool, request hash and size, and how many messages the request held."""
    whole = op if op is not None else (captures[-1]["operation"] if captures else None)
    return [c if c["operation"] == whole else _named(c) for c in captures]


def _named(c: dict[str, Any]) -> dict[str, Any]:
    request = c.get("request")
    messages = request.get("messages") if isinstance(request, dict) else None
    told = {"messages": len(messages)} if isinstance(messages, list) else {}
    return {k: c[k] for k in ("operation", "tool", "request_hash", "bytes", "withheld") if k in c} | told


def _now(state: str, reason: str | None, events: list[dict[str, Any]]) -> dict[str, Any]:
    """The detail of the event that gave the run its current reason: the latest that set a state
    (its kind is the state's name) or a reason; empty if that was another reason (an older
    reason's message is not the run's now)."""
    for e in reversed(events):
        if e["kind"] == state or "reason" in e["detail"]:
            said: dict[str, Any] = e["detail"]
            return said if said.get("reason", reason) == reason else {}
    return {}


def _why(reason: str | None, now: dict[str, Any], approvals: list[dict[str, Any]]) -> str | None:
    """Why the run is where it is, from its current reason only."""
    if reason == "approval":
        asked = [a for a in approvals if a["status"] == "pending"]
        return (
            "; ".join(
                f"waiting for a decision on {a['action']} (approval {a['op_id']}; approvers: "
                f"{', '.join(a['approvers'])})"
                for a in asked
            )
            or None
        )
    if reason == "first" and now.get("waits"):
        return f"waiting for the first of {len(now['waits'])} waits (listed below)"
    return now.get("message") if reason else None


def _numeric(run_id: str) -> list[Any]:
    """A child run's id as it sorts for a person: op-2 before op-10."""
    return [(0, int(t), "") if t.isdigit() else (1, 0, t) for t in re.split(r"(\d+)", run_id)]


def _body(e: Entry, whole: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """An entry's data without its place in the chain (seq, kind, op); a capture's request whole
    (``whole``: ``outlast._captured.requests``)."""
    return {k: v for k, v in shown_data(e, whole).items() if k not in ("seq", "kind", "op")}


def operation(entries: list[Entry], op_id: str) -> dict[str, Any] | None:
    """One operation as ``status RUN --op OP`` shows it: its entries in order (intention, the
    request it sent if captured, result or in-doubt, resolutions), or None if the journal has
    no entry of it."""
    whole = requests(entries)  # a capture's request is rebuilt from the captures before it
    ops = [{"seq": e.seq, "kind": e.kind, **_body(e, whole)} for e in entries if e.op_id == op_id]
    if not ops:
        return None
    state, _ = operation_state(e for e in entries if e.op_id == op_id)
    return {"operation": op_id, "state": state, "entries": ops}


def render_operation(run_id: str, op: dict[str, Any]) -> str:
    """One operation for a person to read; a captured request in full, as it was stored."""
    lines = [f"run {run_id} operation {op['operation']}  ({op['state']})"]
    for e in op["entries"]:
        head = f"  #{e['seq']:<4} {e['kind']:<10}"
        if e["kind"] == "intention":
            lines.append(f"{head} {e['tool']} args hash {e['args_hash']} key {e['key']}")
            lines.append(f"{'':<18}{json.dumps(e['args'], ensure_ascii=False)}")
        elif e["kind"] == "capture":
            what = f"request hash {e.get('request_hash', '-')} ({e.get('bytes', '?')} bytes)"
            lines.append(f"{head} what {e['tool']} sent: {what}")
            if "request" in e:
                text = json.dumps(e["request"], indent=2, ensure_ascii=False)
                lines += [f"{'':<18}{line}" for line in text.splitlines()]
            else:
                lines.append(f"{'':<18}not kept: {e['withheld']}")
        else:
            rest = {k: v for k, v in e.items() if k not in ("seq", "kind")}
            lines.append(f"{head} {json.dumps(rest, ensure_ascii=False, default=str)}")
    return "\n".join(lines)


def _throttled(state: str, events: list[dict[str, Any]]) -> str | None:
    """What a running run waits for at a crossing (a tool's slot or rate): its latest event is
    a ``throttled`` one (``outlast.worker.flow``; the wait's end, or a park, comes after it)."""
    if state not in ("running", "cancelling") or not events or events[-1]["kind"] != "throttled":
        return None
    return str(events[-1]["detail"]["waits_for"])


def _where_it_is(info: dict[str, Any]) -> list[str]:
    """The run's state, and what it waits for or who holds it."""
    r = info["run"]
    state = r["state"] + (f" ({r['reason']})" if r["reason"] else "")
    lines = [f"run {r['id']}  ({r['workflow']}, queue {r['queue']})", f"  state        {state}"]
    if r["state"] == "queued" and r.get("start_at"):  # a delayed run: not delivered before
        lines.append(f"  starts at    {r['start_at']}")
    if r.get("held_back"):
        lines.append(
            f"  waits for    its turn: tenant {r['tenant']} has a full window of runs waiting in queue "
            f"{r['queue']} (OUTLAST_TENANT_WINDOW); published as they start, highest priority first"
        )
    if info["message"]:
        lines.append(f"  why          {info['message']}")
    for f in info.get("forks", []):
        said = f"forked from {f['run']}" if f["kind"] == "forked_from" else f"forked as   {f['as']}"
        lines.append(f"  {said} at {f['from']}")
    for p in info.get("paused", []):
        of = "this run" if p["scope"] == "run" else f"every run of {p['scope']} {p['target']}"
        by = p.get("by", {}).get("principal", "?")
        lines.append(f"  paused       {of}, by {by} at {p['at'][:19]}: {p['why'] or 'no reason given'}")
    for w in info.get("first", []):
        due = f", due {w['due'][:19].replace('T', ' ')}" if w.get("due") else ", no due time"
        lines.append(f"  waits on     {w['op']} {w['on']}{due}")
    if info.get("waits_for"):
        lines.append(f"  waits for    {info['waits_for']} (in its worker)")
    lines += _lineage(info)
    if r["owner"]:
        lines.append(
            f"  lease        {r['owner']}, token {r['fencing_token']}, until {r['lease_expires_at']}"
        )
    return lines


def _artifacts_line(found: list[dict[str, Any]]) -> list[str]:
    """The status's line of the run's artifacts, if it saved any."""
    names = ", ".join(a["name"] for a in found)
    return [f"  artifacts    {len(found)}: {names} (outlast artifacts RUN)"] if found else []


def render(info: dict[str, Any]) -> str:
    """The status for a person to read."""
    r, chain = info["run"], info["chain"]
    lines = _where_it_is(info)
    lines.append(f"  attempts     {_attempts(r)}   program {r['program'] or '-'}   priority {r['priority']}")
    head = chain["head"][:16] or "-"
    verdict = "verifies" if chain["verifies"] else f"ALTERED at crossing #{chain['bad']}"
    lines.append(f"  journal      {chain['entries']} entries, head {head}, chain {verdict}")
    if chain.get("current"):  # carried forward: which generation this is
        shown, now = chain["generation"], chain["current"]
        note = "current" if shown == now else f"ended; the current one is {now}"
        lines.append(f"  generation   {shown} ({note}; earlier ones: outlast status RUN --generation K)")
    lines.append(f"  size         {size_line(info['size'])}")
    lines += _artifacts_line(info.get("artifacts", []))
    for title, key in (("pending", "pending"), ("in doubt", "in_doubt"), ("resolved", "resolutions")):
        for op in info[key]:
            extra = op.get("why") or op.get("how") or ""
            lines.append(f"  {title:<12} {op['operation']} {op['tool']} key {op['key']} {extra}".rstrip())
            if op.get("who"):
                why = f": {op['comment']}" if op.get("comment") else ""
                lines.append(f"  {'':<12} by {who_was(op['who'])}{why}")
    for a in info["approvals"]:
        state = a["status"] if a["status"] != "pending" or not a["expired"] else "expired"
        only = ", authenticated only" if a["authenticated"] else ""
        who = (
            f" by {a['decided_by']}: {a['comment']}"
            if a["decided_by"]
            else f" (approvers: {', '.join(a['approvers'])}{only})"
        )
        # The whole hash while it can be decided: the CLI's --args-hash takes it.
        shown = a["args_hash"] if a["status"] == "pending" else a["args_hash"][:16]
        lines.append(f"  approval     {a['op_id']} {a['action']}({a['args']}) hash {shown} {state}{who}")
        if a["decided_by_detail"]:
            lines.append(f"  {'':<12} decided by {who_was(a['decided_by_detail'])} at {a['decided_at']}")
    for m in info.get("messages", []):
        lines.append(
            f"  message      #{m['seq']} on {m['channel']!r} id {m['message_id']} "
            f"sent {m['created_at']:%Y-%m-%d %H:%M:%S} ({m['via']}), "
            + (f"set aside: {m['set_aside']}" if m["set_aside"] else "not taken")
        )
    for c in info.get("captures", []):
        kept = "not kept" if "withheld" in c else f"{c.get('bytes', '?')} bytes"
        lines.append(
            f"  captured     {c['operation']} {c['tool']} request {c.get('request_hash', '-')[:16]} "
            f"({kept}); shown by: outlast status {r['id']} --op {c['operation']}"
        )
    for b in info["budget"]:
        lines.append(
            f"  budget       {b['name']}: limit {b['limit_value']:g}, "
            f"spent {b['spent']:g}, reserved {b['reserved']:g}"
        )
    if r["cancel_requested"] and r["state"] != "cancelled":
        lines.append("  cancel       requested")
    if r["result"] is not None:
        lines.append(f"  result       {r['result']}")
    if r["error"]:
        lines.append(f"  error        {r['error'].get('type')}: {r['error'].get('message')}")
    return "\n".join(lines)


def size_line(size: dict[str, Any]) -> str:
    """A run's size for a person to read: what it keeps stored, by part, and what it journaled."""
    parts = ", ".join(f"{part} {human_bytes(n)}" for part, n in size["parts"].items() if n)
    line = f"{human_bytes(size['bytes'])} stored ({parts or 'nothing'}); "
    line += f"{human_bytes(size['journaled'])} journaled"
    if size["warned_at"]:
        line += f", past OUTLAST_RUN_SIZE_WARN since {size['warned_at'][:19].replace('T', ' ')}"
    return line


def human_bytes(n: int) -> str:
    """``n`` bytes as a person reads them: 812 B, 12.3 KiB, 1.2 MiB, 3.4 GiB."""
    if n < 1024:
        return f"{n} B"
    size = n / 1024
    for unit in ("KiB", "MiB"):
        if size < 1024:
            return f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"


def _attempts(r: dict[str, Any]) -> str:
    """How many times a worker took the run since it was queued or last began waiting (each wait
    starts the count again; past OUTLAST_MAX_ATTEMPTS the run fails as crashing its worker)."""
    n = r["attempts"]
    if n == 0 and r["state"] == "queued":
        return "0 (not taken yet)"
    if n == 0:
        return "0 (not taken since it last began waiting)"
    return f"{n} (taken {n} time{'s' if n > 1 else ''} since it was queued or last waited)"


def _lineage(info: dict[str, Any]) -> list[str]:
    """The run's tenant, the run that started it, and the child runs it started."""
    r, lines = info["run"], []
    if r["tenant"]:
        lines.append(f"  tenant       {r['tenant']}")
    if r["started_by"]:
        lines.append(f"  started by   {r['started_by']}")
    for c in info["children"]:
        why = f" ({c['reason']})" if c["reason"] else ""
        waited = "  <- waited for" if r["state"] == "waiting" and r["waits_for"] == c["id"] else ""
        lines.append(f"  child        {c['id']} {c['workflow']} {c['state']}{why}{waited}")
    if info["children_truncated"]:
        lines.append(f"  child        ... and more: the first {CHILDREN_SHOWN} shown")
    return lines


def who_was(record: dict[str, Any]) -> str:
    """A decider's record for a person to read: ``alice (ops) via token from 10.0.0.5``, or for a
    declared name ``ops, declared by bob via cli from host-1``."""
    groups = f" ({', '.join(record['groups'])})" if record.get("groups") else ""
    seen = f"{record['principal']}{groups} via {record['how']}" + (
        f" from {record['where']}" if record["where"] else ""
    )
    return f"{record['as']}, declared by {seen}" if "as" in record else seen
