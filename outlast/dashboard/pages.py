"""The pages: runs, a run, the approvals inbox, in-doubt operations, the fleet; sign-in and out;
and the server-sent events that keep a page current without reloading it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from outlast import fleet
from outlast.dashboard import acts, batch, lists, views, web
from outlast.dashboard.auth import (
    LOGIN_BODY,
    LOGIN_COOKIE,
    NUL,
    SESSION_COOKIE,
    SESSION_SECONDS,
    Gate,
    same,
)
from outlast.dashboard.render import login_page, render
from outlast.errors import OutlastError
from outlast.identity import Principal
from outlast.listing import SORTS
from outlast.model import RunState
from outlast.producer import AsyncClient

LIVE_SECONDS = 300.0  # an event stream ends after this; the browser reconnects by itself
TICK = 1.0  # seconds between looks while Postgres cannot push (behind a pooler)
HEARTBEAT = 10.0  # seconds between looks while it pushes: to notice a page closed
STALE = "refused: the form's CSRF token is missing or stale; try again"
Act = Callable[[AsyncClient, Principal, Mapping[str, str], dict[str, Any]], Awaitable[None]]
Page = Callable[[Request, str | None, int], Awaitable[Response]]


def _base(request: Request) -> str:
    return str(request.scope.get("root_path", ""))


def _see(request: Request, path: str) -> RedirectResponse:
    return RedirectResponse(_base(request) + path, status_code=303)


def _run_path(run_id: str) -> str:
    return "/runs/" + quote(run_id, safe="")


async def _form(request: Request) -> dict[str, Any] | None:
    """The posted form, or None when its CSRF token is missing or wrong."""
    form = dict(await request.form())
    caller = web.caller_of(request)
    return form if same(str(form.get("csrf", "")), caller.csrf) else None


async def runs_page(request: Request) -> Response:
    c, q = web.client_of(request), request.query_params
    wanted = q.get("run", "").strip()
    if wanted:
        return _see(request, _run_path(wanted))
    mark, error, cursor = await c.change_mark(), None, None  # first: never ahead of the page
    try:
        runs, cursor = await lists.page_of(c, q)
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
        counts=await c.counts(),
        states=list(RunState),
        query=q,
        error=error,
    )


async def run_page(request: Request, error: str | None = None, status: int = 200) -> Response:
    run_id = request.path_params["run_id"]
    try:
        view = await views.run_view(web.client_of(request), run_id, draw=True)
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
    form = await _form(request)
    if form is None:
        return await page(request, STALE, 403)
    if web.has_nul(form):
        return await page(request, NUL, 400)
    p = request.path_params
    try:
        await act(web.client_of(request), web.caller_of(request).principal, p, form)
    except web.Refusal as exc:
        return await page(request, f"refused: {exc}", exc.status)
    except OutlastError as exc:
        return await page(request, f"refused: {exc}", web.status_of(exc))
    return _see(request, _run_path(p["run_id"]))


async def decide(request: Request) -> Response:
    async def act(c: AsyncClient, who: Principal, p: Mapping[str, str], form: dict[str, Any]) -> None:
        await acts.decide(c, who, p["run_id"], p["approval_id"], form)

    return await _act(request, act, approvals_page, web.DECIDE)


async def in_doubt_page(request: Request, error: str | None = None, status: int = 200) -> Response:
    c, cursor = web.client_of(request), request.query_params.get("cursor") or None
    mark = await c.change_mark()  # first: never ahead of what the page shows
    try:
        runs, after = await views.in_doubt_view(c, cursor)
    except OutlastError as exc:
        (runs, after), error, status = ([], None), str(exc), 400
    nxt = urlencode({"cursor": after}) if after else None
    return render(request, "in_doubt.html", status, runs=runs, next=nxt, first=cursor, mark=mark, error=error)


async def resolve(request: Request) -> Response:
    async def act(c: AsyncClient, who: Principal, p: Mapping[str, str], form: dict[str, Any]) -> None:
        await acts.resolve(c, who, p["run_id"], p["op_id"], form)

    return await _act(request, act, in_doubt_page, web.RESOLVE)


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
    return _see(request, _run_path(made[0])) if made else answer


async def batch_page(request: Request) -> Response:
    """The confirmation of a batch action: how many runs of the list it acts on; posting it acts
    (if the count is still the one shown)."""
    c, act, q = web.client_of(request), request.path_params["act"], request.query_params
    role = {"cancel": web.CANCEL, "resume": web.RESUME}.get(act, web.RETRY)
    why = request.app.state.gate.refusal(web.caller_of(request), *role)
    message, status, count = None, 200, 0
    try:
        if request.method == "POST" and why is not None:  # the count is anyone's to see
            raise batch.BatchRefused(403, f"refused: {why}")
        if request.method == "POST":
            form = await _form(request)
            if form is None:
                raise batch.BatchRefused(403, STALE)
            shown = str(form.get("count", ""))
            who = web.caller_of(request).principal
            done = await batch.run_batch(c, who, act, q, int(shown) if shown.isdigit() else -1)
            refused = "; ".join(f"{k}: {v}" for k, v in done["refused"].items())
            message = f"{act}: {len(done['done'])} runs done" + (f"; refused {refused}" if refused else "")
        else:
            count = len(await batch.targets(c, act, q))
    except batch.BatchRefused as exc:
        message, status = str(exc), exc.status
    except OutlastError as exc:
        message, status = str(exc), web.status_of(exc)
    keep = urlencode(lists.kept(q))
    said = {"message": message} if status < 400 else {"error": message}
    return render(request, "batch.html", status, act=act, count=count, keep=keep, **said)


async def schedules_page(request: Request, message: str | None = None, status: int = 200) -> Response:
    rows = await web.client_of(request).schedules()
    return render(request, "schedules.html", status, schedules=rows, message=message)


async def schedule(request: Request) -> Response:
    """Pause, resume or trigger a schedule (operators), from its form."""
    why = request.app.state.gate.refusal(web.caller_of(request), *web.SCHEDULE)
    if why is not None:
        return await schedules_page(request, f"refused: {why}", 403)
    if await _form(request) is None:
        return await schedules_page(request, STALE, 403)
    c, p = web.client_of(request), request.path_params
    try:
        said = await acts.schedule_act(c, web.caller_of(request).principal, p["name"], p["act"])
    except web.Refusal as exc:
        return await schedules_page(request, f"refused: {exc}", exc.status)
    except OutlastError as exc:
        return await schedules_page(request, f"refused: {exc}", web.status_of(exc))
    return await schedules_page(request, said)


async def fleet_page(request: Request, message: str | None = None, status: int = 200) -> Response:
    view = await views.fleet_view(web.client_of(request))
    return render(request, "fleet.html", status, f=view, message=message)


async def requeue(request: Request) -> Response:
    why = request.app.state.gate.refusal(web.caller_of(request), *web.REQUEUE)
    if why is not None:
        return await fleet_page(request, f"refused: {why}", 403)
    form = await _form(request)
    if form is None:
        return await fleet_page(request, STALE, 403)
    c, queue, entry = web.client_of(request), str(form.get("queue", "")), str(form.get("entry", ""))
    letters = await c.dead_letters(queue, count=1, entry_id=entry) if fleet.is_entry_id(entry) else []
    if not letters:
        return await fleet_page(request, f"no dead letter {entry} on queue '{queue}'", 404)
    _, message = await c.requeue_dead_letter(queue, letters[0])
    return await fleet_page(request, message)


async def login(request: Request) -> Response:
    gate: Gate = request.app.state.gate
    if request.method == "GET":
        return await login_page(request)
    if not await gate.may_try(request):
        return await login_page(request, 429, "too many sign-in attempts from your address: wait a minute")
    try:
        body = await web.capped(request, LOGIN_BODY)
    except web.Refusal as exc:
        return await login_page(request, exc.status, f"refused: {exc} (a sign-in is a token)")
    form = dict(parse_qsl(body.decode("latin-1"), max_num_fields=8))
    nonce = request.cookies.get(LOGIN_COOKIE, "")
    if not same(form.get("csrf", ""), await gate.login_csrf(nonce)):
        return await login_page(request, 403, "the sign-in form was stale: try again")
    sid = await gate.sign_in(form.get("token", "").strip())
    if sid is None:
        return await login_page(request, 401, "that token is not in the users file")
    response = _see(request, "/")
    response.set_cookie(
        SESSION_COOKIE,
        sid,
        max_age=SESSION_SECONDS,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path=_base(request) or "/",
    )
    return response


async def logout(request: Request) -> Response:
    form = await _form(request)
    if form is None:
        return render(request, "error.html", 403, error="the sign-out form was stale: try again")
    await request.app.state.gate.sign_out(request)
    response = _see(request, "/login")
    response.delete_cookie(SESSION_COOKIE, path=_base(request) or "/")
    return response


def _change(mark: int) -> str:
    return f"event: change\ndata: {json.dumps({'mark': mark})}\n\n"


async def _run_changes(c: AsyncClient, run_id: str, after: int) -> AsyncIterator[str]:
    """A ``change`` for each event of the run after ``after``, as Postgres pushes them, then
    ``final`` once the run is final (the page stops listening)."""
    yield "retry: 2000\n\n"
    async for event in c.follow(run_id, after):
        yield _change(int(event["id"]))
    yield "event: final\ndata: {}\n\n"


async def _changes(c: AsyncClient, request: Request, seen: int) -> AsyncIterator[str]:
    """A ``change`` whenever the events' sequence moved, for LIVE_SECONDS (the browser then
    connects again). Woken by Postgres (LISTEN on every run's events, 0020); first a ``mode``
    event says whether that works: behind a transaction pooler notifications do not arrive, and
    the stream polls every TICK seconds instead, which the page then says."""
    yield "retry: 2000\n\n"
    loop = asyncio.get_running_loop()
    until = loop.time() + LIVE_SECONDS
    async with c.watch_runs(TICK) as watch:
        pushed = await watch.hears()
        yield f"event: mode\ndata: {'pushed' if pushed else 'polling'}\n\n"
        while loop.time() < until and not await request.is_disconnected():
            now = await c.change_mark()
            if now != seen:
                seen = now
                yield _change(now)
            if pushed:  # woken by a change; a look now and then notices a closed page
                await watch.changed(timeout=min(HEARTBEAT, max(0.0, until - loop.time())))
            else:
                await asyncio.sleep(TICK)


async def live(request: Request) -> Response:
    """Server-sent events: ``change`` whenever something happened (to the run, with ``?run=``)
    since ``after``, what the page showed: what happened before the stream opened counts too."""
    c, run_id = web.client_of(request), request.query_params.get("run")
    after = request.query_params.get("after", "")
    if run_id:
        events = await c.events(run_id)  # an unknown run: 404, before the stream starts
        seen = int(after) if _digits(after) else (int(events[-1]["id"]) if events else 0)
        stream = _run_changes(c, run_id, seen)
    else:
        stream = _changes(c, request, int(after) if _digits(after) else await c.change_mark())
    headers = {"Cache-Control": "no-store"}
    return StreamingResponse(stream, media_type="text/event-stream", headers=headers)


def _digits(text: str) -> bool:
    return text.isascii() and text.isdigit() and len(text) < 19


def routes() -> list[BaseRoute]:
    """The pages' routes. A run id may hold ``/`` (``{run_id:path}``): the routes that name
    something after it come first."""
    return [
        Route("/", runs_page, name="runs"),
        Route("/runs/{run_id:path}/resolve/{op_id}", resolve, methods=["POST"], name="resolve"),
        Route("/runs/{run_id:path}/cancel", cancel, methods=["POST"], name="cancel"),
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
