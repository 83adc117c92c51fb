"""The JSON API under ``/api/``: what the pages show, and the same decisions, as JSON. The decider
is always the authenticated caller; a request made with a session cookie (or the proxy's header)
must also send its CSRF token in ``X-CSRF-Token``."""

from __future__ import annotations

import io
import json
import re
import zipfile
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from outlast import bundle, fleet
from outlast.dashboard import batch, lists
from outlast.dashboard import timeline as drawing
from outlast.dashboard.auth import NUL, Caller, Gate, same
from outlast.errors import (
    DecisionRefused,
    InvalidInput,
    NotInDoubt,
    OutlastError,
    RunChanged,
    RunFinished,
    RunNotFinished,
    RunNotWaiting,
    UnknownApproval,
    UnknownRun,
    UnknownSchedule,
)
from outlast.identity import APPROVER, OPERATOR, Principal
from outlast.listing import PAGE, RunQuery
from outlast.producer import AsyncClient
from outlast.status import describe

DECISIONS = ("approve", "reject", "revise")
REFUSED = (DecisionRefused, NotInDoubt, RunChanged, RunFinished, RunNotFinished, RunNotWaiting)
API_BODY = 1 << 20  # bytes: a decision, a resolution or revised arguments
TREE_DEPTH, TREE_RUNS = 4, 200  # the children tree a run page walks, at most


class Refusal(Exception):
    """A request the API turns down: its status code and the reason, said to the person."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


def status_of(exc: OutlastError) -> int:
    """The HTTP status of an outlast refusal."""
    if isinstance(exc, UnknownRun | UnknownApproval | UnknownSchedule):
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


def check_role(request: Request, role: str, what: str) -> None:
    """Refuse (403) a caller without ``role``: viewers see everything and act on nothing."""
    gate: Gate = request.app.state.gate
    why = gate.refusal(caller_of(request), role, what)
    if why is not None:
        raise Refusal(403, why)


def has_nul(value: Any) -> bool:
    """Whether a NUL byte hides in a string, a key or a nested value (Postgres refuses them)."""
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(has_nul(k) or has_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(has_nul(v) for v in value)
    return False


def whole(text: str, what: str, default: int) -> int:
    """A count given in a query parameter (ASCII digits), or ``default`` when absent."""
    if not text:
        return default
    if not re.fullmatch(r"[0-9]{1,9}", text):
        raise Refusal(400, f"{what} must be a whole number, got {text[:40]!r}")
    return int(text)


async def capped(request: Request, most: int) -> bytes:
    """The request's body, refused (413) past ``most`` bytes without reading the rest."""
    declared = request.headers.get("content-length", "")
    if declared.isascii() and declared.isdigit() and int(declared) > most:
        raise Refusal(413, f"the body is over {most} bytes")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > most:
            raise Refusal(413, f"the body is over {most} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


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
            except (json.JSONDecodeError, RecursionError) as exc:
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
        except (json.JSONDecodeError, RecursionError) as exc:
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


async def in_doubt_view(
    client: AsyncClient, cursor: str | None = None
) -> tuple[list[dict[str, Any]], str | None]:
    """A page of the runs waiting on an in-doubt operation (every one, paged: the in-doubt list of
    ``runs_page``), each with its operations in doubt; and the next page's cursor."""
    runs, after = await client.runs_page(RunQuery(in_doubt=True), cursor=cursor)
    out = []
    for run in runs:
        info = await describe(client, run.id)
        out.append({"run": info["run"], "in_doubt": info["in_doubt"]})
    return out, after


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


async def _body(request: Request) -> dict[str, Any]:
    caller = caller_of(request)
    if caller.csrf is not None and not same(request.headers.get("x-csrf-token"), caller.csrf):
        raise Refusal(403, "missing or wrong X-CSRF-Token (a session needs it; a bearer token does not)")
    raw = await capped(request, API_BODY)
    try:
        body = json.loads(raw) if raw.strip() else {}
        nul = has_nul(body)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise Refusal(400, "the body must be a JSON object") from None
    except RecursionError:
        raise Refusal(400, "the body is nested too deep: a JSON object of plain values") from None
    if not isinstance(body, dict):
        raise Refusal(400, "the body must be a JSON object")
    if nul:
        raise Refusal(400, NUL)
    return body


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


Handler = Callable[[Request, AsyncClient], Awaitable[Any]]


def _route(path: str, handler: Handler, act: tuple[str, str] | None = None) -> Route:
    """A JSON route: ``handler``'s answer, or ``{"error": ...}`` with the refusal's status. An
    ``act`` (the role it takes, what it does) is a POST: its caller's role and its body (CSRF, a
    JSON object) are checked before the handler sees it."""

    async def endpoint(request: Request) -> Response:
        try:
            if act is not None:
                check_role(request, *act)
                request.state.body = await _body(request)
            answer = await handler(request, client_of(request))
        except Refusal as exc:
            return JSONResponse({"error": str(exc)}, status_code=exc.status)
        except OutlastError as exc:
            return JSONResponse({"error": str(exc)}, status_code=status_of(exc))
        return JSONResponse(_jsonable(answer))

    return Route(path, endpoint, methods=["POST"] if act else ["GET"])


async def _me(request: Request, c: AsyncClient) -> Any:
    caller = caller_of(request)
    return {**caller.principal.record(), "roles": sorted(caller.principal.roles), "csrf": caller.csrf}


async def _runs(request: Request, c: AsyncClient) -> Any:
    """A page of runs: the filters, sort and search of ``lists.py``; ``next`` is the cursor of the
    next page (``?cursor=``), null after the last."""
    q = request.query_params
    runs, cursor = await lists.page_of(c, q, whole(q.get("limit", ""), "limit", PAGE))
    shown = [r.to_dict() | {"duration": lists.duration(r)} for r in runs]
    return {"counts": await c.counts(), "runs": shown, "next": cursor}


async def _run(request: Request, c: AsyncClient) -> Any:
    return await run_view(c, request.path_params["run_id"])


async def _approvals(request: Request, c: AsyncClient) -> Any:
    return await c.pending_approvals()


async def _in_doubt(request: Request, c: AsyncClient) -> Any:
    runs, after = await in_doubt_view(c, request.query_params.get("cursor") or None)
    return {"runs": runs, "next": after}


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


async def _cancel(request: Request, c: AsyncClient) -> Any:
    return (await c.cancel(request.path_params["run_id"], principal=caller_of(request).principal)).to_dict()


async def _resume(request: Request, c: AsyncClient) -> Any:
    """Resume a waiting run; ``{"accept_program_change": true}`` migrates it to the program the
    workers serve now (see the run page's confirmation of what changed)."""
    accept = request.state.body.get("accept_program_change", False)
    if not isinstance(accept, bool):
        raise Refusal(400, "accept_program_change must be true or false")
    run = await c.resume(
        request.path_params["run_id"], accept_program_change=accept, principal=caller_of(request).principal
    )
    return run.to_dict()


async def _retry(request: Request, c: AsyncClient) -> Any:
    """The finished run tried again as its continuation: the new run."""
    return (
        await c.continue_run(request.path_params["run_id"], principal=caller_of(request).principal)
    ).to_dict()


async def _batch_count(request: Request, c: AsyncClient) -> Any:
    """How many runs of the list (the query string of /api/runs) a batch action would act on."""
    act = request.path_params["act"]
    try:
        return {"act": act, "count": len(await batch.targets(c, act, request.query_params))}
    except batch.BatchRefused as exc:
        raise Refusal(exc.status, str(exc)) from None


async def _batch(request: Request, c: AsyncClient) -> Any:
    """Act on the list's runs; the body's ``count`` is what the confirmation showed."""
    count = request.state.body.get("count")
    if isinstance(count, bool) or not isinstance(count, int):
        raise Refusal(400, 'send the count the confirmation showed: {"count": N}')
    try:
        act = request.url.path.rsplit("/", 1)[-1]
        return await batch.run_batch(c, caller_of(request).principal, act, request.query_params, count)
    except batch.BatchRefused as exc:
        raise Refusal(exc.status, str(exc)) from None


async def _schedules(request: Request, c: AsyncClient) -> Any:
    return await c.schedules()


async def schedule_act(c: AsyncClient, who: Principal, name: str, act: str) -> str:
    """Pause, resume or trigger the schedule ``name`` as ``who``; what was done, in words."""
    if act == "trigger":
        run = await c.trigger_schedule(name, principal=who)
        return f"schedule '{name}' triggered: run {run.id}"
    if act not in ("pause", "resume"):
        raise Refusal(404, f"no schedule action '{act[:40]}' (pause, resume, trigger)")
    await c.pause_schedule(name, act == "pause", principal=who)
    return f"schedule '{name}' {act}d"


async def _schedule(request: Request, c: AsyncClient) -> Any:
    p = request.path_params
    return {"message": await schedule_act(c, caller_of(request).principal, p["name"], p["act"])}


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
    return Response(data, media_type="application/zip", headers={"Content-Disposition": attachment(run_id)})


# What each act takes. Resolving an in-doubt operation is an approver's: saying "it did not
# happen" has the effect dispatched again, a decision about the world as weighty as an approval.
DECIDE = (APPROVER, "decide approvals")
RESOLVE = (APPROVER, "resolve in-doubt operations")
CANCEL = (OPERATOR, "cancel runs")
RESUME = (OPERATOR, "resume runs")
RETRY = (OPERATOR, "retry runs")
SCHEDULE = (OPERATOR, "pause, resume or trigger schedules")
REQUEUE = (OPERATOR, "requeue dead letters")


def routes() -> list[BaseRoute]:
    """The API's routes. A run id may hold ``/`` (``{run_id:path}``): the routes that name
    something after it come first."""
    return [
        _route("/api/me", _me),
        _route("/api/runs", _runs),
        Route("/api/runs/{run_id:path}/bundle", _download),
        _route("/api/runs/{run_id:path}/resolve/{op_id}", _resolve, RESOLVE),
        _route("/api/runs/{run_id:path}/cancel", _cancel, CANCEL),
        _route("/api/runs/{run_id:path}/resume", _resume, RESUME),
        _route("/api/runs/{run_id:path}/retry", _retry, RETRY),
        _route("/api/runs/{run_id:path}", _run),
        _route("/api/approvals", _approvals),
        _route("/api/approvals/{run_id:path}/{approval_id}", _decide, DECIDE),
        _route("/api/in-doubt", _in_doubt),
        _route("/api/fleet", _fleet),
        _route("/api/schedules", _schedules),
        _route("/api/batch/cancel", _batch, CANCEL),
        _route("/api/batch/resume", _batch, RESUME),
        _route("/api/batch/retry", _batch, RETRY),
        _route("/api/batch/{act}", _batch_count),
        _route("/api/schedules/{name}/{act}", _schedule, SCHEDULE),
        _route("/api/dead-letters/{queue}/{entry}/requeue", _requeue, REQUEUE),
    ]
