"""The JSON API under ``/api/`` serves what the pages show, and the same decisions, as JSON. The decider
is always the authenticated caller; a request made with a session cookie (or the proxy's header)
must also send its CSRF token in ``X-CSRF-Token``. What is read is in ``views.py``, what is done
in ``acts.py``, what every handler shares in ``web.py``."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import asdict
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from outlast import _fleet as fleet
from outlast._listing import PAGE
from outlast.dashboard import artifacts, batch, feeds, lists, openapi
from outlast.dashboard.acts import decide, resolve, respond, schedule_act
from outlast.dashboard.auth import NUL
from outlast.dashboard.views import attachment, bundle_zip, fleet_view, in_doubt_view, run_view

# Said here too (re-exported): what other modules of the dashboard took from the API's module.
from outlast.dashboard.web import (
    CANCEL,
    DECIDE,
    PAUSE,
    REQUEUE,
    RESOLVE,
    RESPOND,
    RESUME,
    RETRY,
    SCHEDULE,
    Refusal as Refusal,
    caller_of as caller_of,
    capped,
    check_role,
    check_sender,
    client_of as client_of,
    has_nul,
    status_of as status_of,
    whole,
)
from outlast.errors import OutlastError
from outlast.producer import AsyncClient

API_BODY = 1 << 20  # bytes: a decision, a resolution or revised arguments


async def _body(request: Request, limit: int = API_BODY, anything: bool = False) -> Any:
    """The request's JSON body: an object (any JSON value with ``anything``: a message)."""
    caller = caller_of(request)
    if caller.csrf is not None and not caller.accepts(request.headers.get("x-csrf-token")):
        raise Refusal(403, "missing or wrong X-CSRF-Token (a session needs it; a bearer token does not)")
    raw = await capped(request, limit)
    try:
        body = json.loads(raw) if raw.strip() else {}
        nul = has_nul(body)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise Refusal(400, "the body must be a JSON object") from None
    except ValueError:  # an integer of thousands of digits (Python's int limit)
        raise Refusal(400, "a number in the body has too many digits: send it as a string") from None
    except RecursionError:
        raise Refusal(400, "the body is nested too deep: a JSON object of plain values") from None
    if not isinstance(body, dict) and not anything:
        raise Refusal(400, "the body must be a JSON object")
    if nul:
        raise Refusal(400, NUL)
    return body


def _message_route() -> Route:
    """``POST /api/runs/{id}/messages/{channel}``: the body (any JSON) is the message, the
    ``Idempotency-Key`` header its id; a sender or an operator may send."""

    async def endpoint(request: Request) -> Response:
        p = request.path_params
        try:
            check_sender(request)
            settings = client_of(request).settings  # a message past the inline limit is held by reference
            payload = await _body(
                request, max(2 * settings.max_payload, settings.max_referenced), anything=True
            )
            key = request.headers.get("idempotency-key")
            receipt = await client_of(request).send(p["run_id"], p["channel"], payload, key)
        except Refusal as exc:
            return JSONResponse({"error": str(exc)}, status_code=exc.status)
        except OutlastError as exc:
            return JSONResponse({"error": str(exc)}, status_code=status_of(exc))
        return JSONResponse(_jsonable(asdict(receipt)), status_code=200 if receipt.duplicate else 201)

    return Route("/api/runs/{run_id:path}/messages/{channel}", endpoint, methods=["POST"])


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
    runs, cursor = await lists.page_of(c, request.app.state.gate, q, whole(q.get("limit", ""), "limit", PAGE))
    shown = [r.to_dict() | {"duration": lists.duration(r)} for r in runs]
    return {**lists.counts_answer(await c.counts()), "runs": shown, "next": cursor}


async def _run(request: Request, c: AsyncClient) -> Any:
    return await run_view(c, request.path_params["run_id"], op=request.query_params.get("op"))


async def _approvals(request: Request, c: AsyncClient) -> Any:
    return await c.pending_approvals()


async def _in_doubt(request: Request, c: AsyncClient) -> Any:
    runs, after = await in_doubt_view(c, request.app.state.gate, request.query_params.get("cursor"))
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


async def _requests(request: Request, c: AsyncClient) -> Any:
    """The run's requests waiting for an answer; ``?all=1``: answered and expired ones too."""
    return await c.requests(request.path_params["run_id"], pending=request.query_params.get("all") != "1")


async def _respond(request: Request, c: AsyncClient) -> Any:
    """Answer a request as the caller: ``{"answer": <a JSON value of the response type>}``; the
    answer that stands, and ``again`` (true: the same answer was already given)."""
    p = request.path_params
    if "answer" not in request.state.body:
        raise Refusal(400, 'send {"answer": <a JSON value of the response type>}')
    done = await respond(c, caller_of(request).principal, p["run_id"], p["request_id"], request.state.body)
    return {
        "run_id": done.run_id,
        "request_id": done.request_id,
        "answer": done.value,
        "by": done.by,
        "again": done.again,
    }


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


def _scope(body: dict[str, Any]) -> dict[str, Any]:
    """The one run_id, workflow or queue a pause or an unpause names (the client checks it)."""
    return {k: body.get(k) for k in ("workflow", "queue")} | {"run_id": body.get("run_id")}


async def _pause(request: Request, c: AsyncClient) -> Any:
    """Pause ``{"run_id": ...}``, ``{"workflow": ...}`` or ``{"queue": ...}``, with ``why``."""
    body = request.state.body
    why = body.get("why", "")
    if not isinstance(why, str):
        raise Refusal(400, "why must be text")
    return await c.pause(**_scope(body), why=why, principal=caller_of(request).principal)


async def _unpause(request: Request, c: AsyncClient) -> Any:
    """Lift the pause of a run, a workflow or a queue: the ids of the runs queued again."""
    return {"queued": await c.unpause(**_scope(request.state.body), principal=caller_of(request).principal)}


async def _pauses(request: Request, c: AsyncClient) -> Any:
    return await c.pauses()


async def _retry(request: Request, c: AsyncClient) -> Any:
    """The finished run tried again as its continuation: the new run."""
    return (
        await c.continue_run(request.path_params["run_id"], principal=caller_of(request).principal)
    ).to_dict()


async def _batch_count(request: Request, c: AsyncClient) -> Any:
    """What a batch action would act on, in the list of the query string (that of /api/runs, and
    a retry's ``include``): the confirmation, whose ``count`` and ``digest`` the act sends back."""
    act, q = request.path_params["act"], request.query_params
    try:
        return (await batch.targets(c, act, q, batch.included(act, q.getlist("include")))).confirmation()
    except batch.BatchRefused as exc:
        raise Refusal(exc.status, str(exc)) from None


async def _batch(request: Request, c: AsyncClient) -> Any:
    """Act on the list's runs; the body's ``count`` and ``digest`` are what the confirmation
    (``GET`` of the same URL) said."""
    body = request.state.body
    count, digest = body.get("count"), body.get("digest")
    if isinstance(count, bool) or not isinstance(count, int) or not isinstance(digest, str):
        raise Refusal(400, 'send what the confirmation said: {"count": N, "digest": "..."}')
    act, q = request.url.path.rsplit("/", 1)[-1], request.query_params
    try:
        include = batch.included(act, q.getlist("include"))
        return await batch.run_batch(c, caller_of(request).principal, act, q, include, (count, digest))
    except batch.BatchRefused as exc:
        raise Refusal(exc.status, str(exc)) from None


async def _schedules(request: Request, c: AsyncClient) -> Any:
    return await c.schedules()


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


def routes() -> list[BaseRoute]:
    """The API's routes. A run id may hold ``/`` (``{run_id:path}``): the routes that name
    something after it come first."""
    return [
        Route("/api/openapi.json", openapi.document),
        _route("/api/me", _me),
        _route("/api/runs", _runs),
        Route("/api/runs/{run_id:path}/bundle", _download),
        Route("/api/runs/{run_id:path}/artifact", artifacts.download),
        Route("/api/runs/{run_id:path}/state", feeds.state),
        Route("/api/runs/{run_id:path}/events", feeds.events),
        Route("/api/runs/{run_id:path}/stream", feeds.stream),
        _message_route(),
        _route("/api/runs/{run_id:path}/resolve/{op_id}", _resolve, RESOLVE),
        _route("/api/runs/{run_id:path}/requests", _requests),
        _route("/api/runs/{run_id:path}/requests/{request_id}", _respond, RESPOND),
        _route("/api/runs/{run_id:path}/cancel", _cancel, CANCEL),
        _route("/api/runs/{run_id:path}/resume", _resume, RESUME),
        _route("/api/runs/{run_id:path}/retry", _retry, RETRY),
        _route("/api/runs/{run_id:path}", _run),
        _route("/api/approvals", _approvals),
        _route("/api/approvals/{run_id:path}/{approval_id}", _decide, DECIDE),
        _route("/api/in-doubt", _in_doubt),
        _route("/api/fleet", _fleet),
        _route("/api/pauses", _pauses),
        _route("/api/pause", _pause, PAUSE),
        _route("/api/unpause", _unpause, PAUSE),
        _route("/api/schedules", _schedules),
        _route("/api/batch/cancel", _batch, CANCEL),
        _route("/api/batch/resume", _batch, RESUME),
        _route("/api/batch/retry", _batch, RETRY),
        _route("/api/batch/{act}", _batch_count),
        _route("/api/schedules/{name}/{act}", _schedule, SCHEDULE),
        _route("/api/dead-letters/{queue}/{entry}/requeue", _requeue, REQUEUE),
    ]
