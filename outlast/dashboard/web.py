"""The dashboard's handlers, the pages' and the API's, share this module. It holds who asks (the
client and the authenticated caller), how a refusal is said (``Refusal``, the HTTP status of an
outlast error, the role an act takes), input bounded before it is read; and the pages' forms and
redirects."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import RedirectResponse

from outlast import errors as e
from outlast.dashboard.auth import Caller, Gate
from outlast.errors import OutlastError
from outlast.identity import APPROVER, OPERATOR, SENDER
from outlast.producer import AsyncClient

# The HTTP status of each outlast error: what the refusal says about the request, said once. A
# class not named here takes its nearest named ancestor's (tests/unit/test_status_of.py checks that
# every error class has one below the root, so that none falls silently to a server error).
STATUS: dict[type[OutlastError], int] = {
    # The request itself cannot be accepted.
    e.InvalidInput: 400,
    # What it names is not there.
    e.UnknownRun: 404,
    e.UnknownApproval: 404,
    e.UnknownSchedule: 404,
    e.UnknownWorkflow: 404,
    e.UnknownTool: 404,
    # The caller may not make this decision (not an approver; a declared name, where the workflow
    # asked for a signed-in decider).
    e.DecisionForbidden: 403,
    e.AnswerForbidden: 403,
    # The run (or the request) is not in the state the request needs: look again.
    e.DecisionRefused: 409,
    e.AnswerRefused: 409,
    e.RunConflict: 409,
    e.RunFinished: 409,
    e.RunNotFinished: 409,
    e.RunNotWaiting: 409,
    e.RunChanged: 409,
    e.NotInDoubt: 409,
    e.MessageRefused: 409,  # unknown run, final, too large, too many untaken: the message says which
    e.Fenced: 409,
    e.InDoubt: 409,
    e.ResumeRefused: 409,
    e.ProgramChanged: 409,
    e.JournalAltered: 409,
    e.ResumeImpossible: 409,
    e.PayloadChanged: 409,  # a value held by reference whose bytes no longer match its hash
    # A server it needs is out of reach, or not ready for this outlast: try again later.
    e.ServiceUnavailable: 503,
    e.SchemaError: 503,
    # Gave up waiting; the run goes on.
    e.WaitTimeout: 504,
    # The dashboard's own failures: its settings, its workers.
    e.ConfigError: 500,
    e.WorkersDying: 500,
    e.DemoFailed: 500,
    # How a run ended, raised inside a workflow: reaching a request is the dashboard's own failure.
    e.ChildFailed: 500,
    e.ToolError: 500,
    e.ToolTimeout: 500,
    e.PolicyRefused: 500,
    e.BudgetExhausted: 500,
    e.TimedOut: 500,
    e.DeadlineExceeded: 500,
    e.ApprovalRejected: 500,
    e.ApprovalExpired: 500,
    e.RequestExpired: 500,
    e.PartialRefused: 500,
    e.Failure: 500,
}

# What each act takes. Resolving an in-doubt operation is an approver's: saying "it did not
# happen" has the effect dispatched again, a decision about the world as weighty as an approval.
DECIDE = (APPROVER, "decide approvals")
RESOLVE = (APPROVER, "resolve in-doubt operations")
RESPOND = (OPERATOR, "answer requests")
CANCEL = (OPERATOR, "cancel runs")
RESUME = (OPERATOR, "resume runs")
RETRY = (OPERATOR, "retry runs")
PAUSE = (OPERATOR, "pause and unpause runs")
SCHEDULE = (OPERATOR, "pause, resume or trigger schedules")
REQUEUE = (OPERATOR, "requeue dead letters")
DOWNLOAD = (OPERATOR, "download artifacts")
SEND = (OPERATOR, "send messages to runs")  # or the sender role: check_sender
STALE = "refused: the form's CSRF token is missing or stale; try again"


class Refusal(Exception):
    """A ``Refusal`` is a request the API turns down: its status code and the reason, said to the person."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


def status_of(exc: OutlastError) -> int:
    """The HTTP status of an outlast refusal: its class's in ``STATUS``, or its nearest named
    ancestor's; 500 for the root itself (an error no class names is the dashboard's failure)."""
    for cls in type(exc).__mro__:
        if cls in STATUS:
            return STATUS[cls]
    return 500


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


def check_sender(request: Request) -> None:
    """Refuse (403) a caller who is neither a sender nor an operator."""
    if SENDER not in caller_of(request).principal.roles:
        check_role(request, *SEND)


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


def base(request: Request) -> str:
    """Where the dashboard is mounted (its root path; empty at the root)."""
    return str(request.scope.get("root_path", ""))


def see(request: Request, path: str) -> RedirectResponse:
    """A page's answer to a form: see ``path`` (303)."""
    return RedirectResponse(base(request) + path, status_code=303)


def run_path(run_id: str) -> str:
    return "/runs/" + quote(run_id, safe="")


async def form_of(request: Request) -> dict[str, Any] | None:
    """The posted form, or None when its CSRF token is missing or wrong."""
    form = dict(await request.form())
    caller = caller_of(request)
    return form if caller.accepts(str(form.get("csrf", ""))) else None
