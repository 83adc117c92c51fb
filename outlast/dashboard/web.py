"""What the dashboard's handlers share, the pages' and the API's: who asks (the client and the
authenticated caller), how a refusal is said (``Refusal``, the HTTP status of an outlast error,
the role an act takes), and input bounded before it is read."""

from __future__ import annotations

import re
from typing import Any

from starlette.requests import Request

from outlast.dashboard.auth import Caller, Gate
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
from outlast.identity import APPROVER, OPERATOR
from outlast.producer import AsyncClient

REFUSED = (DecisionRefused, NotInDoubt, RunChanged, RunFinished, RunNotFinished, RunNotWaiting)

# What each act takes. Resolving an in-doubt operation is an approver's: saying "it did not
# happen" has the effect dispatched again, a decision about the world as weighty as an approval.
DECIDE = (APPROVER, "decide approvals")
RESOLVE = (APPROVER, "resolve in-doubt operations")
CANCEL = (OPERATOR, "cancel runs")
RESUME = (OPERATOR, "resume runs")
RETRY = (OPERATOR, "retry runs")
SCHEDULE = (OPERATOR, "pause, resume or trigger schedules")
REQUEUE = (OPERATOR, "requeue dead letters")


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
