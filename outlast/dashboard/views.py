"""This module holds what the pages and the API read: a run (its status, timeline, drawing and
children tree), the fleet, the runs in doubt, and a run's debug bundle as a zip made in memory."""

from __future__ import annotations

import io
import re
import zipfile
from typing import Any
from urllib.parse import quote

from outlast import _bundle as bundle
from outlast._listing import RunQuery
from outlast._shapes import described
from outlast._status import CHILDREN_SHOWN, describe
from outlast.dashboard import lists, timeline as drawing
from outlast.dashboard.auth import Gate
from outlast.producer import AsyncClient

TREE_DEPTH, TREE_RUNS = 4, CHILDREN_SHOWN  # the children tree a run page shows, at most
SHOWN_CHARS, SHOWN_ITEMS = 2000, 100  # of a string, of a list, in a timeline entry's detail


def bounded(value: Any, where: str = "") -> Any:
    """A value as a page's timeline shows it: a string past ``SHOWN_CHARS`` cut, a list past
    ``SHOWN_ITEMS`` too, each saying how much more there is and where it is whole (a long run's
    page stays the size of its journal's entries, not of their values); ``where`` ends the note."""
    if isinstance(value, str) and len(value) > SHOWN_CHARS:
        return value[:SHOWN_CHARS] + f"… [{len(value) - SHOWN_CHARS} more characters{where}]"
    if isinstance(value, list):
        kept = [bounded(v, where) for v in value[:SHOWN_ITEMS]]
        return kept + (
            [f"… [{len(value) - SHOWN_ITEMS} more items{where}]"] if len(value) > SHOWN_ITEMS else []
        )
    if isinstance(value, dict):
        return {k: bounded(v, where) for k, v in value.items()}
    return value


async def run_view(
    client: AsyncClient, run_id: str, draw: bool = False, op: str | None = None
) -> dict[str, Any]:
    """Everything the run page shows: the status, its timeline (events and journal crossings, by
    time, each value bounded), its approvals and the requests waiting for an answer, the request
    each captured operation sent (whole for ``op``, the last one by default; the others named);
    with ``draw``, the timeline drawn (SVG) and the tree of children."""
    events = await client.events(run_id)  # first: the mark is never ahead of the status shown
    info = await describe(client, run_id, shown=op)
    times = await client.journal_times(run_id)
    entries = await client.journal(run_id)
    in_events = f": whole in outlast events {run_id}"  # a custom event's data may be 10 MiB (0036)
    timeline: list[dict[str, Any]] = [
        {"at": e["at"], "what": "event", "kind": e["kind"], "detail": bounded(e["detail"], in_events)}
        for e in events
    ]
    if draw:
        bars, markers = drawing.read(entries, times, events)
        now = max([*times.values(), *(e["at"] for e in events)], default=None)
        info["drawn"] = drawing.svg(bars, markers, now, _capture_href) if now is not None else ""
        info["tree"] = await children_tree(client, run_id) if info["children"] else []
    for e in entries:  # a capture as stored (what it added); its request whole under "captures"
        whole_at = f": whole in outlast status {run_id} --op {e.op_id}" if e.op_id else ""
        timeline.append(
            {
                "at": times.get(e.seq),
                "what": "journal",
                "kind": e.kind,
                "seq": e.seq,
                "op": e.op_id,
                "hash": e.hash,
                "detail": bounded(e.data, whole_at),
            }
        )
    timeline.sort(key=lambda t: (t["at"] is None, t["at"]))
    asked = [r | {"type": described(r["response_schema"])} for r in await client.requests(run_id)]
    # The values a client reads whole (input, result, messages, state) are cut here as the
    # timeline's are: a run given 10 MiB is not a page of 10 MiB.
    whole_at = f": whole in outlast status {run_id} --json"
    info["run"] = info["run"] | {k: bounded(info["run"].get(k), whole_at) for k in ("input", "result")}
    info["inbox"] = bounded(await client.messages(run_id), whole_at)  # sent, and taken by which operation
    shown = {k: {"value": s.value, "version": s.version} for k, s in (await client.state(run_id)).items()}
    custom = [
        e for e in events if e["kind"].startswith("custom:")
    ]  # run.emit's (outlast's own hold no colon)
    return {
        **info,
        "requests": asked,
        "timeline": timeline,
        "shown_state": bounded(shown, whole_at),
        "custom_events": bounded(custom, whole_at),
        "mark": events[-1]["id"] if events else 0,
    }


def _capture_href(op: str) -> str:
    return f"?op={quote(op, safe='')}#capture-{op}"  # the page again, that operation's request whole


async def children_tree(client: AsyncClient, run_id: str) -> list[dict[str, Any]]:
    """The runs ``run_id`` started, and theirs, as a tree (each with its own ``children``):
    TREE_DEPTH levels and TREE_RUNS runs at most, nearer levels first, read in one statement
    however many there are: a page never walks an unbounded fan-out."""
    rows = await client.children_tree(run_id, TREE_DEPTH, TREE_RUNS)
    top: list[dict[str, Any]] = []
    nodes: dict[str, dict[str, Any]] = {}
    for r in rows:  # breadth first: a run's parent comes before it
        node = {k: r[k] for k in ("id", "workflow", "state", "reason")} | {"children": []}
        parent = nodes.get(r["parent"])
        (top if parent is None else parent["children"]).append(node)
        nodes[r["id"]] = node
    return top


async def fleet_view(client: AsyncClient) -> dict[str, Any]:
    """Workers (heartbeat records), queues (stream figures and unfinished runs), the parked runs
    per workflow and reason with their way out, dead letters."""
    queues = await client.queues()
    letters = {q["queue"]: await client.dead_letters(q["queue"], count=100) for q in queues}
    parked = await client.parked()
    return {"workers": await client.workers(), "queues": queues, "parked": parked, "dead_letters": letters}


async def in_doubt_view(
    client: AsyncClient, gate: Gate, cursor: str | None = None
) -> tuple[list[dict[str, Any]], str | None]:
    """A page of the runs waiting on an in-doubt operation (every one, paged: the in-doubt list of
    ``runs_page``), each with its operations in doubt; and the next page's cursor (signed, bound
    to this list: ``lists.sealed``)."""
    query = RunQuery(in_doubt=True)
    bound = lists.bound_to("in-doubt", query)
    runs, after = await client.runs_page(query, cursor=await lists.opened(gate, cursor, bound))
    out = []
    for run in runs:
        info = await describe(client, run.id)
        out.append({"run": info["run"], "in_doubt": info["in_doubt"]})
    return out, await lists.sealed(gate, after, bound)


def safe_name(run_id: str) -> str:
    """The run id as a plain file name: ASCII letters, digits and ``_.-`` (others become ``_``),
    no leading dot; never a path."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", run_id).lstrip(".") or "run"


async def bundle_zip(client: AsyncClient, run_id: str) -> bytes:
    """The run's debug bundle (``outlast export``) as a zip file, made in memory: no file is
    written, so no run id can aim it anywhere. Its folder is the run id made a safe name."""
    texts = await bundle.contents(client, run_id)
    data = io.BytesIO()
    with zipfile.ZipFile(data, "w", zipfile.ZIP_DEFLATED) as z:
        for name, text in texts.items():
            z.writestr(f"{safe_name(run_id)}/{name}", text)
    return data.getvalue()


def attachment(run_id: str) -> str:
    """The download's Content-Disposition: an ASCII name, and the run id itself (RFC 5987)."""
    return (
        f'attachment; filename="outlast-{safe_name(run_id)}.zip"; '
        f"filename*=UTF-8''outlast-{quote(run_id, safe='')}.zip"
    )
