"""This module holds the OpenAPI 3 document of the JSON API (``/api/...``) and the callbacks
endpoint (``/callbacks/{token}``), written by hand and served at ``GET /api/openapi.json``. A client
in another language is generated from it. tests/integration/test_openapi.py checks that it names every route
of the app under those paths, with its methods, and nothing else, and fuzzes each operation
through a real ``outlast dashboard`` as each role: no answer outside what is declared here."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from outlast._callbacks import MAX_KEY
from outlast.dashboard.batch import ACTS
from outlast.dashboard.web import base
from outlast.producer.messages import MAX_ID

Doc = dict[str, Any]
WINDOWS = ["hour", "day", "week"]  # the charts' (outlast/dashboard/charts.py, which imports the API)
DESCRIBED = ("/api/", "/callbacks/")  # the paths whose routes the document names

OBJECT: Doc = {"type": "object"}
ERROR: Doc = {
    "type": "object",
    "required": ["error"],
    "properties": {"error": {"type": "string", "minLength": 1, "description": "why, in one line"}},
}
WHY = {
    400: "the request cannot be accepted: the body, a parameter or a NUL byte in the URL",
    401: "not authenticated",
    403: "not the caller's to do: the role it takes, or a session's missing X-CSRF-Token",
    404: "not there, or no route takes the URL",
    405: "the URL is another route's, of another method",
    409: "not in the state the request needs: look again",
    410: "this callback is closed: its run is final",
    413: "the body is too large",
    422: "the body is not a valid message for this callback",
    429: "too many: try again later",
    503: "Postgres or Redis out of reach: try again later",
}


def _json(schema: Doc, what: str) -> Doc:
    return {"description": what, "content": {"application/json": {"schema": schema}}}


def _path(name: str, what: str) -> Doc:
    return {"name": name, "in": "path", "required": True, "schema": {"type": "string"}, "description": what}


def _query(name: str, what: str, schema: Doc | None = None) -> Doc:
    return {"name": name, "in": "query", "schema": schema or {"type": "string"}, "description": what}


RUN = _path("run_id", "the run's id, percent-encoded (an id may hold /)")
FILTERS = [  # the runs list's (outlast/dashboard/lists.py: PARAMS)
    *(_query(n, f"only runs of this {n}") for n in ("state", "workflow", "queue", "tenant", "priority")),
    _query("parent", "only runs started by this run"),
    _query("in_doubt", "1: only runs waiting on an in-doubt operation"),
    _query("since", "created at or after this ISO 8601 time"),
    _query("until", "created before this ISO 8601 time"),
    _query("prefix", "only run ids that start with this"),
    _query("input", "a JSON object the run's input contains"),
    _query("sort", "created (the default) or another column of the runs list"),
]
COUNT = {"type": "integer", "minimum": 0, "maximum": 999_999_999}
CSRF = {"name": "X-CSRF-Token", "in": "header", "schema": {"type": "string"}, "description": "a session's"}
AFTER = [
    _query("after", "go on after this id (as Last-Event-ID does)"),
    {"name": "Last-Event-ID", "in": "header", "schema": {"type": "string"}, "description": "as after"},
]


def _events(*kinds: str) -> Doc:
    """Server-sent events of these kinds, each event's data a JSON text."""
    props = {"event": {"enum": list(kinds)}, "data": {"type": "string"}, "id": {"type": "string"}}
    event = {"type": "object", "required": ["event", "data"], "properties": props}
    return {"200": {"description": "server-sent events", "content": {"text/event-stream": {"schema": event}}}}


def _op(
    summary: str, answer: Doc, errors: tuple[int, ...], params: list[Doc] | None = None, post: bool = False
) -> Doc:
    """An operation of the API: every one may be refused with 400 (a NUL byte in its URL), 401 and
    503, each with its reason in ``{"error": ...}``. One with path parameters answers 404 when a
    parameter holds a newline (no route takes the URL); a POST, 405 when one holds / (the URL is a
    GET's)."""
    named = any(p["in"] == "path" for p in params or [])
    unrouted = (404, *((405,) if post else ())) if named else ()
    refusals = {str(s): _json(ERROR, WHY[s]) for s in sorted({400, 401, 503, *errors, *unrouted})}
    return {"summary": summary, "parameters": params or [], "responses": {**answer, **refusals}}


def _get(summary: str, schema: Doc = OBJECT, errors: tuple[int, ...] = (), **more: Any) -> Doc:
    return {"get": _op(summary, {"200": _json(schema, "the answer")}, errors, **more)}


# What a pause or an unpause names: one of a run, a workflow, a queue.
PAUSED = {k: {"type": "string"} for k in ("run_id", "workflow", "queue")}


def _act(summary: str, body: Doc = OBJECT, errors: tuple[int, ...] = (404, 409), **more: Any) -> Doc:
    """A POST of an act: it takes a role (403), a session's CSRF token, and a JSON object (413 past
    1 MiB)."""
    params = [*more.pop("params", []), CSRF]
    op = _op(summary, {"200": _json(OBJECT, "done")}, (403, 413, *errors), params, post=True, **more)
    content = {"application/json": {"schema": body}}
    return {"post": {**op, "requestBody": {"required": False, "content": content}}}


def _run_get(
    summary: str, errors: tuple[int, ...] = (404,), params: list[Doc] | None = None, **more: Any
) -> Doc:
    return _get(summary, errors=errors, params=[RUN, *(params or [])], **more)


def _with(item: Doc, answers: dict[str, Doc]) -> Doc:
    """``item``'s one operation answering ``answers`` (instead of its JSON 200)."""
    ((method, op),) = item.items()
    responses = {k: v for k, v in op["responses"].items() if k != "200"}
    return {method: {**op, "responses": {**answers, **responses}}}


BATCH_BODY: Doc = {
    "type": "object",
    "required": ["count", "digest"],
    "properties": {"count": {"type": "integer"}, "digest": {"type": "string"}},
}
MESSAGE_ANSWER = _json(OBJECT, "the receipt: message_id, duplicate")


def _key(most: int) -> Doc:
    """The ``Idempotency-Key`` header: the message's id (the same again is one message)."""
    schema = {"type": "string", "minLength": 1, "maxLength": most}
    return {"name": "Idempotency-Key", "in": "header", "schema": schema, "description": "the message's id"}


def _message() -> Doc:
    channel = {**_path("channel", "the channel's name"), "schema": {"type": "string", "maxLength": MAX_ID}}
    params = [RUN, channel, _key(MAX_ID), CSRF]
    sent = {"201": MESSAGE_ANSWER, "200": _json(OBJECT, "already sent")}
    op = _op("send a message (a sender or an operator)", sent, (403, 409, 413), params, post=True)
    body = {"required": False, "content": {"application/json": {"schema": {}}}}
    return {"post": {**op, "requestBody": body}}


def _callback() -> Doc:
    """The callbacks endpoint: no account, its token is its key (not the API's refusals)."""
    answer = {
        "type": "object",
        "properties": {"accepted": {"type": "boolean"}, "duplicate": {"type": "boolean"}},
    }
    responses = {"202": _json(answer, "the message is taken")}
    responses |= {str(s): _json(ERROR, WHY[s]) for s in (400, 404, 410, 413, 422, 429, 503)}
    body = {"content": {"application/json": {"schema": {}}, "text/plain": {"schema": {"type": "string"}}}}
    return {
        "post": {
            "summary": "a callback: the body becomes a message on the token's run and channel",
            "security": [],
            "parameters": [_path("token", "the signed token of run.callback()"), _key(MAX_KEY)],
            "requestBody": body,
            "responses": responses,
        }
    }


BATCH = "a batch act on the runs of the list (the confirmation's count and digest)"
PATHS: Doc = {
    "/api/openapi.json": _get("this document"),
    "/api/me": _get("who you are, and the CSRF token a session's POSTs send"),
    "/api/runs": _get(
        "a page of runs, with the counts by state",
        errors=(400,),
        params=[
            *FILTERS,
            _query("limit", "runs per page", COUNT),
            _query("cursor", "the previous page's next"),
        ],
    ),
    "/api/runs/{run_id}": _run_get("the run page's data"),
    "/api/runs/{run_id}/bundle": _with(
        _run_get("the debug bundle"), {"200": {"description": "a zip", "content": {"application/zip": {}}}}
    ),
    "/api/runs/{run_id}/artifact": _with(
        _run_get(
            "one artifact of the run (operators): its bytes, or a redirect to a presigned URL "
            "where the payload store is S3",
            (403, 404),
            params=[_query("name", "the artifact's name"), _query("op", "its operation (else the latest)")],
        ),
        {
            "200": {"description": "the artifact's bytes", "content": {"application/octet-stream": {}}},
            "307": {"description": "a presigned URL (Location), good for 300 seconds"},
        },
    ),
    "/api/runs/{run_id}/state": _run_get("the run's state"),
    "/api/runs/{run_id}/events": _with(
        _run_get("the run's events", (404, 429), params=AFTER), _events("event", "end")
    ),
    "/api/runs/{run_id}/stream": _with(
        _run_get("the run's live output", (404, 429), params=AFTER), _events("chunk", "result")
    ),
    "/api/runs/{run_id}/messages/{channel}": _message(),
    "/api/runs/{run_id}/requests": _run_get(
        "the run's requests",
        schema={"type": "array"},
        params=[_query("all", "1: answered and expired ones too")],
    ),
    "/api/runs/{run_id}/requests/{request_id}": _act(
        "answer a request (an operator among its responders)",
        {"type": "object", "required": ["answer"], "properties": {"answer": {}}},
        params=[RUN, _path("request_id", "the request's id")],
    ),
    "/api/runs/{run_id}/resolve/{op_id}": _act(
        "resolve an in-doubt operation (an approver)",
        {"type": "object", "properties": {"executed": {"type": "boolean"}, "result": {}, "comment": {}}},
        params=[RUN, _path("op_id", "the operation's id")],
    ),
    "/api/runs/{run_id}/cancel": _act("cancel a run (an operator)", params=[RUN]),
    "/api/runs/{run_id}/resume": _act(
        "resume a waiting run (an operator)",
        {"type": "object", "properties": {"accept_program_change": {"type": "boolean"}}},
        params=[RUN],
    ),
    "/api/runs/{run_id}/retry": _act("retry a finished run as a new run (an operator)", params=[RUN]),
    "/api/approvals": _get("the pending approvals", {"type": "array"}),
    "/api/approvals/{run_id}/{approval_id}": _act(
        "decide an approval (an approver among its approvers)",
        {"type": "object", "properties": {"decision": {"enum": ["approve", "reject", "revise"]}}},
        params=[RUN, _path("approval_id", "the approval's id")],
    ),
    "/api/in-doubt": _get(
        "a page of the runs waiting on an in-doubt operation",
        params=[_query("cursor", "the previous page's next")],
        errors=(400,),
    ),
    "/api/fleet": _get("workers, queues, parked runs per workflow and reason, dead letters"),
    "/api/pauses": _get("the pauses in force: scope, target, by, why, at", {"type": "array"}),
    "/api/pause": _act(
        "pause a run, every run of a workflow or of a queue (an operator)",
        {"type": "object", "properties": {**PAUSED, "why": {"type": "string"}}},
        errors=(400, 404, 409),
    ),
    "/api/unpause": _act(
        "lift a pause: its runs go on (an operator)", {"type": "object", "properties": PAUSED}, errors=(400,)
    ),
    "/api/charts": _get(
        "the charts' figures",
        errors=(400,),
        params=[_query("window", "what the charts cover (hour: the default)", {"enum": WINDOWS})],
    ),
    "/api/schedules": _get("the schedules", {"type": "array"}),
    "/api/schedules/{name}/{act}": _act(
        "pause, resume or trigger a schedule (an operator)",
        params=[_path("name", "the schedule's name"), _path("act", "pause, resume or trigger")],
    ),
    "/api/batch/{act}": _get(
        "what a batch act would act on: the confirmation",
        errors=(404,),
        params=[
            {**_path("act", "the act"), "schema": {"enum": list(ACTS)}},
            *FILTERS,
            _query("include", "a retry's extra states"),
        ],
    ),
    **{
        f"/api/batch/{act}": _act(BATCH, BATCH_BODY, params=[*FILTERS, _query("include", "a retry's")])
        for act in ACTS
    },
    "/api/dead-letters/{queue}/{entry}/requeue": _act(
        "requeue a dead letter's run (an operator)",
        params=[_path("queue", "the queue"), _path("entry", "the dead letter's entry id")],
    ),
    "/callbacks/{token}": _callback(),
}

SECURITY = {
    "bearer": {"type": "http", "scheme": "bearer", "description": "a token of the users file"},
    "session": {"type": "apiKey", "in": "cookie", "name": "outlast_session", "description": "signed in"},
}
DOCUMENT: Doc = {
    "openapi": "3.0.3",
    "info": {
        "title": "outlast dashboard API",
        "version": "1",
        "description": 'An error is {"error": "..."}. A session\'s POST sends X-CSRF-Token (GET /api/me).',
    },
    "security": [{"bearer": []}, {"session": []}],
    "components": {"securitySchemes": SECURITY},
    "paths": PATHS,
}


async def document(request: Request) -> Response:
    """``GET /api/openapi.json``: the document, its server where the dashboard is mounted."""
    return JSONResponse({**DOCUMENT, "servers": [{"url": base(request) or "/"}]})
