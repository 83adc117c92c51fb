"""The pages: runs, a run, the approvals inbox, in-doubt operations, the fleet; sign-in and out;
and the server-sent events that keep a page current without reloading it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from outlast import fleet
from outlast.dashboard import api
from outlast.dashboard.auth import LOGIN_COOKIE, SESSION_COOKIE, SESSION_SECONDS, Gate, same
from outlast.dashboard.render import login_page, render
from outlast.errors import OutlastError
from outlast.identity import Principal
from outlast.model import RunState
from outlast.producer import AsyncClient

LIVE_SECONDS = 300.0  # an event stream ends after this; the browser reconnects by itself
TICK = 1.0
STALE = "refused: the form's CSRF token is missing or stale; try again"
Act = Callable[[AsyncClient, Principal, Mapping[str, str], dict[str, Any]], Awaitable[None]]
Page = Callable[[Request, str | None, int], Awaitable[Response]]


def _base(request: Request) -> str:
    return str(request.scope.get("root_path", ""))


def _see(request: Request, path: str) -> RedirectResponse:
    return RedirectResponse(_base(request) + path, status_code=303)


async def _form(request: Request) -> dict[str, Any] | None:
    """The posted form, or None when its CSRF token is missing or wrong."""
    form = dict(await request.form())
    caller = api.caller_of(request)
    return form if same(str(form.get("csrf", "")), caller.csrf) else None


async def runs_page(request: Request) -> Response:
    c, q = api.client_of(request), request.query_params
    wanted = q.get("run", "").strip()
    if wanted:
        return _see(request, "/runs/" + quote(wanted, safe=""))
    state = q.get("state") or None
    mark, error = await c.change_mark(), None  # first: never ahead of what the page shows
    try:
        runs = await c.runs(state, 100, workflow=q.get("workflow") or None, queue=q.get("queue") or None)
    except OutlastError as exc:
        runs, error = [], str(exc)
    return render(
        request,
        "runs.html",
        200 if error is None else 400,
        runs=runs,
        mark=mark,
        counts=await c.counts(),
        states=list(RunState),
        query=q,
        error=error,
    )


async def run_page(request: Request) -> Response:
    run_id = request.path_params["run_id"]
    try:
        view = await api.run_view(api.client_of(request), run_id, draw=True)
    except OutlastError as exc:
        return render(request, "error.html", api.status_of(exc), error=str(exc))
    return render(request, "run.html", run=view["run"], v=view)


async def approvals_page(request: Request, error: str | None = None, status: int = 200) -> Response:
    pending = await api.client_of(request).pending_approvals()
    me = api.caller_of(request).principal
    return render(request, "approvals.html", status, pending=pending, me=me, error=error)


async def _act(request: Request, act: Act, page: Page) -> Response:
    """A decision or resolution posted by a form, made as the signed-in principal; refused, the
    page it came from says why."""
    form = await _form(request)
    if form is None:
        return await page(request, STALE, 403)
    p = request.path_params
    try:
        await act(api.client_of(request), api.caller_of(request).principal, p, form)
    except api.Refusal as exc:
        return await page(request, f"refused: {exc}", exc.status)
    except OutlastError as exc:
        return await page(request, f"refused: {exc}", api.status_of(exc))
    return _see(request, f"/runs/{p['run_id']}")


async def decide(request: Request) -> Response:
    async def act(c: AsyncClient, who: Principal, p: Mapping[str, str], form: dict[str, Any]) -> None:
        await api.decide(c, who, p["run_id"], p["approval_id"], form)

    return await _act(request, act, approvals_page)


async def in_doubt_page(request: Request, error: str | None = None, status: int = 200) -> Response:
    runs = await api.in_doubt_view(api.client_of(request))
    return render(request, "in_doubt.html", status, runs=runs, error=error)


async def resolve(request: Request) -> Response:
    async def act(c: AsyncClient, who: Principal, p: Mapping[str, str], form: dict[str, Any]) -> None:
        await api.resolve(c, who, p["run_id"], p["op_id"], form)

    return await _act(request, act, in_doubt_page)


async def fleet_page(request: Request, message: str | None = None, status: int = 200) -> Response:
    view = await api.fleet_view(api.client_of(request))
    return render(request, "fleet.html", status, f=view, message=message)


async def requeue(request: Request) -> Response:
    form = await _form(request)
    if form is None:
        return await fleet_page(request, STALE, 403)
    c, queue, entry = api.client_of(request), str(form.get("queue", "")), str(form.get("entry", ""))
    letters = await c.dead_letters(queue, count=1, entry_id=entry) if fleet.is_entry_id(entry) else []
    if not letters:
        return await fleet_page(request, f"no dead letter {entry} on queue '{queue}'", 404)
    _, message = await c.requeue_dead_letter(queue, letters[0])
    return await fleet_page(request, message)


async def login(request: Request) -> Response:
    gate: Gate = request.app.state.gate
    if request.method == "GET":
        return login_page(request)
    where = gate.where(request)
    if not gate.may_try(where):
        return login_page(request, 429, "too many sign-in attempts from your address: wait a minute")
    form = await request.form()
    if not same(str(form.get("csrf", "")), gate.login_csrf(request.cookies.get(LOGIN_COOKIE, ""))):
        return login_page(request, 403, "the sign-in form was stale: try again")
    sid = gate.sign_in(str(form.get("token", "")).strip(), where)
    if sid is None:
        return login_page(request, 401, "that token is not in the users file")
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
    request.app.state.gate.sign_out(request)
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
    """A ``change`` whenever the events' sequence moved, looked at every second (the push feed
    wakes only those watching a run), for LIVE_SECONDS; the browser then connects again."""
    yield "retry: 2000\n\n"
    loop = asyncio.get_running_loop()
    until = loop.time() + LIVE_SECONDS
    while loop.time() < until and not await request.is_disconnected():
        now = await c.change_mark()
        if now != seen:
            seen = now
            yield _change(now)
        await asyncio.sleep(TICK)


async def live(request: Request) -> Response:
    """Server-sent events: ``change`` whenever something happened (to the run, with ``?run=``)
    since ``after``, what the page showed: what happened before the stream opened counts too."""
    c, run_id = api.client_of(request), request.query_params.get("run")
    after = request.query_params.get("after", "")
    if run_id:
        events = await c.events(run_id)  # an unknown run: 404, before the stream starts
        seen = int(after) if after.isdigit() else (int(events[-1]["id"]) if events else 0)
        stream = _run_changes(c, run_id, seen)
    else:
        stream = _changes(c, request, int(after) if after.isdigit() else await c.change_mark())
    headers = {"Cache-Control": "no-store"}
    return StreamingResponse(stream, media_type="text/event-stream", headers=headers)


def routes() -> list[BaseRoute]:
    return [
        Route("/", runs_page, name="runs"),
        Route("/runs/{run_id}", run_page, name="run"),
        Route("/approvals", approvals_page, name="approvals"),
        Route("/approvals/{run_id}/{approval_id}", decide, methods=["POST"], name="decide"),
        Route("/in-doubt", in_doubt_page, name="in_doubt"),
        Route("/runs/{run_id}/resolve/{op_id}", resolve, methods=["POST"], name="resolve"),
        Route("/fleet", fleet_page, name="fleet"),
        Route("/fleet/requeue", requeue, methods=["POST"], name="requeue"),
        Route("/login", login, methods=["GET", "POST"], name="login"),
        Route("/logout", logout, methods=["POST"], name="logout"),
        Route("/live", live, name="live"),
    ]
