"""This module serves the pages: runs, a run and what is done to it, the approvals inbox, in-doubt
operations, batch acts. It also holds every page's route (schedules and the fleet in ``operate.py``, signing
in and out in ``signin.py``, the server-sent events in ``live.py``)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from outlast._listing import SORTS
from outlast._model import RunState
from outlast.dashboard import acts, batch, lists, views, web
from outlast.dashboard.auth import NUL, Gate
from outlast.dashboard.live import live
from outlast.dashboard.operate import fleet_page, requeue, schedule, schedules_page
from outlast.dashboard.render import render
from outlast.dashboard.signin import login, logout
from outlast.errors import OutlastError
from outlast.identity import SENDER, Principal
from outlast.producer import AsyncClient

Act = Callable[[AsyncClient, Principal, Mapping[str, str], dict[str, Any]], Awaitable[None]]
Page = Callable[[Request, str | None, int], Awaitable[Response]]


async def runs_page(request: Request) -> Response:
    c, q = web.client_of(request), request.query_params
    wanted = q.get("run", "").strip()
    if wanted:
        return web.see(request, web.run_path(wanted))
    mark, error, cursor = await c.change_mark(), None, None  # first: never ahead of the page
    try:
        runs, cursor = await lists.page_of(c, request.app.state.gate, q)
    except OutlastError as exc:
        runs, error = [], str(exc)
    keep = lists.kept(q)
    return render(
        request,
        "runs.html",
        200 if error is None else 400,
        runs=runs,
        duration=lists.duration,
        next=urlencode(keep | {"cursor": cursor}) if cursor else None,
        first=urlencode(keep) if q.get("cursor") else None,
        sorts=SORTS,
        mark=mark,
        counts=lists.counts_shown(await c.counts()),
        states=list(RunState),
        query=q,
        error=error,
    )


async def run_page(request: Request, error: str | None = None, status: int = 200) -> Response:
    run_id = request.path_params["run_id"]
    try:
        view = await views.run_view(
            web.client_of(request), run_id, draw=True, op=request.query_params.get("op")
        )
    except OutlastError as exc:  # a refusal said first, else that the run is not there
        return render(request, "error.html", status if error else web.status_of(exc), error=error or str(exc))
    me, final = web.caller_of(request).principal, RunState(view["run"]["state"]).final
    return render(request, "run.html", status, run=view["run"], v=view, me=me, final=final, error=error)


async def approvals_page(request: Request, error: str | None = None, status: int = 200) -> Response:
    c = web.client_of(request)
    mark = await c.change_mark()  # first: never ahead of what the page shows
    pending = await c.pending_approvals()
    me = web.caller_of(request).principal
    return render(request, "approvals.html", status, pending=pending, me=me, mark=mark, error=error)


async def _act(request: Request, act: Act, page: Page, role: tuple[str, str]) -> Response:
    """An act posted by a form (a decision, a resolution, a cancellation...), made as the
    signed-in principal if their role allows it; refused, the page it came from says why."""
    gate: Gate = request.app.state.gate
    why = gate.refusal(web.caller_of(request), *role)
    if why is not None:
        return await page(request, f"refused: {why}", 403)
    form = await web.form_of(request)
    if form is None:
        return await page(request, web.STALE, 403)
    if web.has_nul(form):
        return await page(request, NUL, 400)
    p = request.path_params
    try:
        await act(web.client_of(request), web.caller_of(request).principal, p, form)
    except web.Refusal as exc:
        return await page(request, f"refused: {exc}", exc.status)
    except OutlastError as exc:
        return await page(request, f"refused: {exc}", web.status_of(exc))
    return web.see(request, web.run_path(p["run_id"]))


async def decide(request: Request) -> Response:
    async def act(c: AsyncClient, who: Principal, p: Mapping[str, str], form: dict[str, Any]) -> None:
        await acts.decide(c, who, p["run_id"], p["approval_id"], form)

    return await _act(request, act, approvals_page, web.DECIDE)


async def in_doubt_page(request: Request, error: str | None = None, status: int = 200) -> Response:
    c, cursor = web.client_of(request), request.query_params.get("cursor") or None
    mark = await c.change_mark()  # first: never ahead of what the page shows
    try:
        runs, after = await views.in_doubt_view(c, request.app.state.gate, cursor)
    except OutlastError as exc:
        (runs, after), error, status = ([], None), str(exc), 400
    nxt = urlencode({"cursor": after}) if after else None
    return render(request, "in_doubt.html", status, runs=runs, next=nxt, first=cursor, mark=mark, error=error)


async def resolve(request: Request) -> Response:
    async def act(c: AsyncClient, who: Principal, p: Mapping[str, str], form: dict[str, Any]) -> None:
        await acts.resolve(c, who, p["run_id"], p["op_id"], form)

    return await _act(request, act, in_doubt_page, web.RESOLVE)


async def send(request: Request) -> Response:
    """A message sent from the run page's form (a sender or an operator)."""

    async def act(c: AsyncClient, who: Principal, p: Mapping[str, str], form: dict[str, Any]) -> None:
        try:
            payload = json.loads(str(form.get("payload", "")))
        except (ValueError, RecursionError):
            raise web.Refusal(400, "the message must be JSON (a string in quotes)") from None
        await c.send(
            p["run_id"], str(form.get("channel", "")), payload, str(form.get("message_id") or "") or None
        )

    sender = SENDER in web.caller_of(request).principal.roles
    return await _act(request, act, run_page, (SENDER, "send messages to runs") if sender else web.SEND)


async def respond(request: Request) -> Response:
    async def act(c: AsyncClient, who: Principal, p: Mapping[str, str], form: dict[str, Any]) -> None:
        await acts.respond(c, who, p["run_id"], p["request_id"], form)

    return await _act(request, act, run_page, web.RESPOND)


async def cancel(request: Request) -> Response:
    async def act(c: AsyncClient, who: Principal, p: Mapping[str, str], form: dict[str, Any]) -> None:
        await c.cancel(p["run_id"], principal=who)

    return await _act(request, act, run_page, web.CANCEL)


async def resume(request: Request) -> Response:
    async def act(c: AsyncClient, who: Principal, p: Mapping[str, str], form: dict[str, Any]) -> None:
        accept = form.get("accept_program_change") == "yes"
        await c.resume(p["run_id"], accept_program_change=accept, principal=who)

    return await _act(request, act, run_page, web.RESUME)


async def accept_page(request: Request) -> Response:
    """The confirmation of a resume that accepts a program change: the program that admitted the
    run, and what the worker that parked it said changed."""
    c, run_id = web.client_of(request), request.path_params["run_id"]
    run = await c.status(run_id)
    if run.state != RunState.WAITING or run.reason != "program_changed":
        return await run_page(request, f"run '{run_id}' is not waiting for a program change", 409)
    said = [
        e["detail"] for e in await c.events(run_id) if (e["detail"] or {}).get("reason") == "program_changed"
    ]
    changed = said[-1].get("message", "") if said else ""
    return render(request, "accept.html", run=run, changed=changed)


async def retry(request: Request) -> Response:
    """A finished run tried again as its continuation (same workflow and input, its budget and
    deadline); the page then shows the new run."""
    made: list[str] = []

    async def act(c: AsyncClient, who: Principal, p: Mapping[str, str], form: dict[str, Any]) -> None:
        made.append((await c.continue_run(p["run_id"], principal=who)).id)

    answer = await _act(request, act, run_page, web.RETRY)
    return web.see(request, web.run_path(made[0])) if made else answer


async def _batch_act(request: Request, act: str, include: tuple[str, ...]) -> str:
    """The confirmed batch action, posted by its form (the count and digest it showed); what
    was done, in a sentence."""
    role = {"cancel": web.CANCEL, "resume": web.RESUME}.get(act, web.RETRY)
    why = request.app.state.gate.refusal(web.caller_of(request), *role)
    if why is not None:  # the confirmation is anyone's to see, the act is not
        raise batch.BatchRefused(403, f"refused: {why}")
    form = await web.form_of(request)
    if form is None:
        raise batch.BatchRefused(403, web.STALE)
    shown = str(form.get("count", ""))
    if not (shown.isascii() and shown.isdigit() and len(shown) <= 9):
        raise batch.BatchRefused(400, "the count must be the confirmation's: a whole number of runs")
    confirmed = (int(shown), str(form.get("digest", "")))
    who, q = web.caller_of(request).principal, request.query_params
    done = await batch.run_batch(web.client_of(request), who, act, q, include, confirmed)
    refused = "; ".join(f"{k}: {v}" for k, v in done["refused"].items())
    return f"{act}: {len(done['done'])} runs done" + (f"; refused {refused}" if refused else "")


async def batch_page(request: Request) -> Response:
    """The confirmation of a batch action: the list's filter, how many runs of each state it acts
    on and those of the list it leaves out; posting it acts, if the runs are still those shown."""
    c, act, q = web.client_of(request), request.path_params["act"], request.query_params
    message, status = None, 200
    shown: batch.Batch | None = None
    include: tuple[str, ...] = ()
    try:
        include = batch.included(act, q.getlist("include"))
        if request.method == "POST":
            message = await _batch_act(request, act, include)
        else:
            shown = await batch.targets(c, act, q, include)
    except batch.BatchRefused as exc:
        message, status = str(exc), exc.status
    except OutlastError as exc:
        message, status = str(exc), web.status_of(exc)
    listed = lists.kept(q)
    keep = urlencode(listed | ({"include": ",".join(include)} if include else {}))
    said = {"message": message} if status < 400 else {"error": message}
    return render(
        request,
        "batch.html",
        status,
        act=act,
        batch=shown,
        listed=listed,
        include=include,
        on_request=[str(s) for s in batch.ON_REQUEST],
        keep=keep,
        back=urlencode(listed),
        **said,
    )


def routes() -> list[BaseRoute]:
    """The pages' routes. A run id may hold ``/`` (``{run_id:path}``): the routes that name
    something after it come first."""
    return [
        Route("/", runs_page, name="runs"),
        Route("/runs/{run_id:path}/resolve/{op_id}", resolve, methods=["POST"], name="resolve"),
        Route("/runs/{run_id:path}/respond/{request_id}", respond, methods=["POST"], name="respond"),
        Route("/runs/{run_id:path}/cancel", cancel, methods=["POST"], name="cancel"),
        Route("/runs/{run_id:path}/send", send, methods=["POST"], name="send"),
        Route("/runs/{run_id:path}/resume", resume, methods=["POST"], name="resume"),
        Route("/runs/{run_id:path}/retry", retry, methods=["POST"], name="retry"),
        Route("/runs/{run_id:path}/accept", accept_page, name="accept"),
        Route("/runs/{run_id:path}", run_page, name="run"),
        Route("/approvals", approvals_page, name="approvals"),
        Route("/approvals/{run_id:path}/{approval_id}", decide, methods=["POST"], name="decide"),
        Route("/in-doubt", in_doubt_page, name="in_doubt"),
        Route("/fleet", fleet_page, name="fleet"),
        Route("/schedules", schedules_page, name="schedules"),
        Route("/batch/{act}", batch_page, methods=["GET", "POST"], name="batch"),
        Route("/schedules/{name}/{act}", schedule, methods=["POST"], name="schedule"),
        Route("/fleet/requeue", requeue, methods=["POST"], name="requeue"),
        Route("/login", login, methods=["GET", "POST"], name="login"),
        Route("/logout", logout, methods=["POST"], name="logout"),
        Route("/live", live, name="live"),
    ]
