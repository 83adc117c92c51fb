"""This module holds the rules of an answer to a request (``run.request``) in one place.

They say who may answer, with what value, and what an answer sent again or too late means. The
client applies them (``judge``) before and after committing an answer; the store commits the first
one; the worker journals it on resume.

The value is checked against the JSON schema the request stored (``shapes.py``): whoever answers
needs no copy of the workflow's program. The first valid answer stands: the same value again is
accepted and changes nothing (whoever sends it, the first responder stays recorded); a different
one is refused.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from outlast._shapes import problem
from outlast.errors import AnswerForbidden, AnswerRefused
from outlast.identity import ASSERTED, Principal, cli_principal


class Verdict(Enum):
    ANSWER = "answer"  # commit it: the request is pending and unexpired
    SAME_AGAIN = "same_again"  # the very answer that stands: accepted, changes nothing


def responder(principal: Principal | None, by: str | None, where: str) -> tuple[Principal, str]:
    """Who answers, and the name checked against the responders: an authenticated principal
    answers as itself; the CLI's (or a program's) as ``by`` when given, else as its
    operating-system user."""
    if principal is None:
        principal = cli_principal("client")
    if principal.how not in ASSERTED:
        if by is not None and by != principal.name:
            raise AnswerRefused(
                f"{where}: by= is the CLI's --by; with an authenticated principal ({principal.name}) "
                "the responder is the principal"
            )
        return principal, principal.name
    return principal, by or principal.name


def who(principal: Principal, name: str) -> dict[str, Any]:
    """The responder's record, journaled with the answer (a declared name beside its user and host)."""
    record = principal.record()
    if principal.how in ASSERTED:
        record["as"] = name
    return record


def judge(
    request: dict[str, Any] | None,
    value: Any,
    principal: Principal,
    name: str,
    run_id: str,
    where: str,
    *,
    run_state: str | None = None,
) -> Verdict:
    """What to do with the answer ``value`` on ``request`` (its stored row, with ``expired`` by
    the database clock), or ``AnswerRefused`` naming why and the way out. ``run_state`` is given
    after a commit that found nothing to answer: a request still pending then has no waiting run."""
    look = f"see: outlast requests {run_id}"
    if request is None:
        raise AnswerRefused(f"{where}: no such request ({look})")
    allowed = request["responders"]
    if allowed:
        if principal.how in ASSERTED and name not in allowed:
            raise AnswerForbidden(f"{where}: '{name}' may not answer (responders: {', '.join(allowed)})")
        if principal.how not in ASSERTED and not principal.may(allowed):
            raise AnswerForbidden(
                f"{where}: {principal.name} may not answer (responders: {', '.join(allowed)})"
            )
    wrong = problem(request["response_schema"], value)
    if wrong is not None:
        raise AnswerRefused(f"{where}: {wrong}; nothing was stored (the response type: {look})")
    if request["status"] == "answered":
        if request["answer"] == value:
            return Verdict.SAME_AGAIN
        raise AnswerRefused(
            f"{where}: already answered by {request['answered_by']}; a different answer is refused "
            f"(the answer that stands: {look})"
        )
    if request["status"] == "withdrawn":
        raise AnswerRefused(
            f"{where}: withdrawn: the run went on without it (another wait came first; {look})"
        )
    if request["expired"]:
        raise AnswerRefused(f"{where}: the request expired at {request['expires_at']:%Y-%m-%d %H:%M:%S %Z}")
    if run_state is not None:
        raise AnswerRefused(
            f"{where}: the run is {run_state}, not waiting on this request; try again once it waits ({look})"
        )
    return Verdict.ANSWER
