"""The JSON API under ``/api/``: what the pages show, and the same decisions, as JSON. The decider
is always the authenticated caller; a request made with a session cookie (or the proxy's header)
must also send its CSRF token in ``X-CSRF-Token``."""

from __future__ import annotations

import io
import json
import tempfile
import zipfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from outlast import bundle, fleet
from outlast.dashboard import timeline as drawing
from outlast.dashboard.auth import Caller, same
from outlast.errors import (
    DecisionRefused,
    InvalidInput,
    NotInDoubt,
    OutlastError,
    RunChanged,
    RunNotWaiting,
    UnknownApproval,
    UnknownRun,
)
from outlast.identity import Principal
from outlast.model import RunState
from outlast.producer import AsyncClient
from outlast.status import describe

DECISIONS = ("approve", "reject", "revise")
REFUSED = (DecisionRefused, NotInDoubt, RunChanged, RunNotWaiting)
TREE_DEPTH, TREE_RUNS = 4, 200  # the children tree a run page walks, at most


class Refusal(Exception):
    """A request the API turns down: its status code and the reason, said to the person."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


def status_of(exc: OutlastError) -> int:
    """The HTTP status of an outlast refusal."""
    if isinstance(exc, UnknownRun | UnknownApproval):
        return 404
    if isinstance(exc, InvalidInput):
        return 400
    if isinstance(exc, REFUSED):
        return 409
    return 503


def client_of(request: Request) -> AsyncClient:
    c: AsyncClient = request.app.state.client
    return c


def caller_of(request: Request) -> Caller:
    c: Caller = request.state.caller
    return c


async def decide(
    client: AsyncClient,
    principal: Principal,
    run_id: str,
    approval_id: str,
    form: dict[str, Any],
) -> None:
    """Approve, reject or revise as ``principal``, for the action whose hash the person saw."""
    decision, comment, args_hash = form.get("decision"), form.get("comment"), form.get("args_hash")
    if decision not in DECISIONS:
        raise Refusal(400, f"decision must be one of {', '.join(DECISIONS)}")
    if not isinstance(args_hash, str) or not args_hash:
        raise Refusal(400, "args_hash is required: the hash of the arguments you saw")
    if not isinstance(comment, str) or not comment.strip():
        raise Refusal(400, "a comment is required: say why")
    kw: dict[str, Any] = {"principal": principal, "comment": comment, "args_hash": args_hash}
    if decision == "approve":
        await client.approve(run_id, approval_id, **kw)
    elif decision == "reject":
        await client.reject(run_id, approval_id, **kw)
    else:
        args = form.get("args")
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except json.JSONDecodeError as exc:
                raise Refusal(400, f"the revised arguments are not JSON: {exc}") from None
        if not isinstance(args, dict):
            raise Refusal(400, "the revised arguments must be a JSON object")
        tool = (
            client.app.tools.get((await client.approval(run_id, approval_id))["action"])
            if client.app
            else None
        )
        if tool is not None:
            tool.validate(args)  # InvalidInput naming what is wrong; the worker checks again at the call
        await client.revise(run_id, approval_id, args=args, **kw)


async def resolve(
    client: AsyncClient, principal: Principal, run_id: str, op_id: str, form: dict[str, Any]
) -> None:
    """Resolve an in-doubt operation as ``principal``: executed (with an optional result) or not."""
    executed, comment = form.get("executed"), form.get("comment")
    if isinstance(executed, str):
        executed = {"yes": True, "true": True, "no": False, "false": False}.get(executed)
    if not isinstance(executed, bool):
        raise Refusal(400, "executed must be true or false")
    if not isinstance(comment, str) or not comment.strip():
        raise Refusal(400, "a comment is required: say why")
    result = form.get("result")
    if isinstance(result, str):
        try:
            result = json.loads(result) if result.strip() else None
        except json.JSONDecodeError as exc:
            raise Refusal(400, f"the result is not JSON: {exc}") from None
    await client.resolve(
        run_id, op_id, executed=executed, result=result, principal=principal, comment=comment
    )


async def run_view(client: AsyncClient, run_id: str, draw: bool = False) -> dict[str, Any]:
    """Everything the run page shows: the status, its timeline (events and journal crossings, by
    time), and its approvals; with ``draw``, the timeline drawn (SVG) and the tree of children."""
    events = await client.events(run_id)  # first: the mark is never ahead of the status shown
    info = await describe(client, run_id)
    times = await client.journal_times(run_id)
    entries = await client.journal(run_id)
    timeline: list[dict[str, Any]] = [
        {"at": e["at"], "what": "event", "kind": e["kind"], "detail": e["detail"]} for e in events
    ]
    if draw:
        bars, markers = drawing.read(entries, times, events)
        now = max([*times.values(), *(e["at"] for e in events)], default=None)
        info["drawn"] = drawing.svg(bars, markers, now, _capture_href) if now is not None else ""
        info["tree"] = await children_tree(client, info["children"])
    for e in entries:
        timeline.append(
            {
                "at": times.get(e.seq),
                "what": "journal",
                "kind": e.kind,
                "seq": e.seq,
                "op": e.op_id,
                "hash": e.hash,
                "detail": e.data,
            }
        )
    timeline.sort(key=lambda t: (t["at"] is None, t["at"]))
    return {**info, "timeline": timeline, "mark": events[-1]["id"] if events else 0}


def _capture_href(op: str) -> str:
    return "#capture-" + op


async def children_tree(
    client: AsyncClient, children: list[dict[str, Any]], depth: int = 1, budget: list[int] | None = None
) -> list[dict[str, Any]]:
    """The children as a tree (each with its own ``children``), TREE_DEPTH levels and TREE_RUNS
    runs at most: a page never walks an unbounded fan-out."""
    budget = [TREE_RUNS] if budget is None else budget
    tree = []
    for child in children:
        if budget[0] <= 0:
            break
        budget[0] -= 1
        below = await client.children(child["id"]) if depth < TREE_DEPTH else []
        tree.append({**child, "children": await children_tree(client, below, depth + 1, budget)})
    return tree


async def fleet_view(client: AsyncClient) -> dict[str, Any]:
    """Workers (heartbeat records), queues (stream figures and unfinished runs), dead letters."""
    queues = await client.queues()
    letters = {q["queue"]: await client.dead_letters(q["queue"], count=100) for q in queues}
    return {"workers": await client.workers(), "queues": queues, "dead_letters": letters}


async def in_doubt_view(client: AsyncClient) -> list[dict[str, Any]]:
    """Each run waiting on an in-doubt operation, with its operations in doubt."""
    out = []
    for run in await client.runs(RunState.WAITING.value, limit=200):
        if run.reason == "in_doubt":
            info = await describe(client, run.id)
            out.append({"run": info["run"], "in_doubt": info["in_doubt"]})
    return out


async def bundle_zip(client: AsyncClient, run_id: str) -> bytes:
    """The run's debug bundle (``outlast export``) as a zip file."""
    with tempfile.TemporaryDirectory() as tmp:
        files = await bundle.export(client, run_id, Path(tmp) / run_id)
        data = io.BytesIO()
        with zipfile.ZipFile(data, "w", zipfile.ZIP_DEFLATED) as z:
            for f in files:
                z.write(f, f"{run_id}/{f.name}")
    return data.getvalue()


async def _body(request: Request) -> dict[str, Any]:
    caller = caller_of(request)
    if caller.csrf is not None and not same(request.headers.get("x-csrf-token"), caller.csrf):
        raise Refusal(403, "missing or wrong X-CSRF-Token (a session needs it; a bearer token does not)")
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise Refusal(400, "the body must be a JSON object") from None
    if not isinstance(body, dict):
        raise Refusal(400, "the body must be a JSON object")
    return body


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


Handler = Callable[[Request, AsyncClient], Awaitable[Any]]


def _route(path: str, handler: Handler, post: bool = False) -> Route:
    """A JSON route: ``handler``'s answer, or ``{"error": ...}`` with the refusal's status; a
    POST's body is checked (CSRF, a JSON object) before the handler sees it."""

    async def endpoint(request: Request) -> Response:
        try:
            if post:
                request.state.body = await _body(request)
            answer = await handler(request, client_of(request))
        except Refusal as exc:
            return JSONResponse({"error": str(exc)}, status_code=exc.status)
        except OutlastError as exc:
            return JSONResponse({"error": str(exc)}, status_code=status_of(exc))
        return JSONResponse(_jsonable(answer))

    return Route(path, endpoint, methods=["POST"] if post else ["GET"])


async def _me(request: Request, c: AsyncClient) -> Any:
    caller = caller_of(request)
    return {**caller.principal.record(), "csrf": caller.csrf}


async def _runs(request: Request, c: AsyncClient) -> Any:
    q = request.query_params
    limit = q.get("limit", "50")
    runs = await c.runs(
        q.get("state") or None,
        int(limit) if limit.isdigit() else 50,
        workflow=q.get("workflow") or None,
        queue=q.get("queue") or None,
    )
    return {"counts": await c.counts(), "runs": [r.to_dict() for r in runs]}


async def _run(request: Request, c: AsyncClient) -> Any:
    return await run_view(c, request.path_params["run_id"])


async def _approvals(request: Request, c: AsyncClient) -> Any:
    return await c.pending_approvals()


async def _in_doubt(request: Request, c: AsyncClient) -> Any:
    return await in_doubt_view(c)


async def _fleet(request: Request, c: AsyncClient) -> Any:
    return await fleet_view(c)


async def _decide(request: Request, c: AsyncClient) -> Any:
    p = request.path_params
    await decide(c, caller_of(request).principal, p["run_id"], p["approval_id"], request.state.body)
    return (await c.status(p["run_id"])).to_dict()


async def _resolve(request: Request, c: AsyncClient) -> Any:
    p = request.path_params
    await resolve(c, caller_of(request).principal, p["run_id"], p["op_id"], request.state.body)
    return (await c.status(p["run_id"])).to_dict()


async def _requeue(request: Request, c: AsyncClient) -> Any:
    queue, entry = request.path_params["queue"], request.path_params["entry"]
    letters = await c.dead_letters(queue, count=1, entry_id=entry) if fleet.is_entry_id(entry) else []
    if not letters:
        raise Refusal(404, f"no dead letter {entry} on queue '{queue}'")
    outcome, message = await c.requeue_dead_letter(queue, letters[0])
    return {"outcome": outcome, "message": message}


async def _download(request: Request) -> Response:
    run_id = request.path_params["run_id"]
    try:
        data = await bundle_zip(client_of(request), run_id)
    except OutlastError as exc:
        return JSONResponse({"error": str(exc)}, status_code=status_of(exc))
    return Response(
        data,
        media_type="application/zip",
        headers={"Content-Disposition": f'attachment; filename="outlast-{run_id}.zip"'},
    )


def routes() -> list[BaseRoute]:
    return [
        _route("/api/me", _me),
        _route("/api/runs", _runs),
        _route("/api/runs/{run_id}", _run),
        Route("/api/runs/{run_id}/bundle", _download),
        _route("/api/runs/{run_id}/resolve/{op_id}", _resolve, post=True),
        _route("/api/approvals", _approvals),
        _route("/api/approvals/{run_id}/{approval_id}", _decide, post=True),
        _route("/api/in-doubt", _in_doubt),
        _route("/api/fleet", _fleet),
        _route("/api/dead-letters/{queue}/{entry}/requeue", _requeue, post=True),
    ]
