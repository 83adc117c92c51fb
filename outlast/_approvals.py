"""The rules of an approval decision live here, in one place: who may decide, on what, with what comment,
and what a decision sent again or too late means. The client applies them (``judge``) before
and after committing a decision; the store commits it; the worker journals it on resume.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

from outlast._secrets import check_revision
from outlast.errors import DecisionForbidden, DecisionRefused, InvalidInput
from outlast.identity import ASSERTED, Principal, cli_principal

MAX_COMMENT = 500
DECISIONS = ("approved", "rejected", "revised")


@dataclass(frozen=True)
class Proposed:
    """A ``Proposed`` is a decision as a person sends it. It says what, who decides (``decider``,
    and ``approver``, the name checked against the approvers and recorded), why, on which arguments
    (their hash, as the approver saw it) and, for ``revised``, the new arguments."""

    status: str
    decider: Principal
    approver: str
    comment: str
    args_hash: str
    new_args: dict[str, Any] | None = None

    def who(self) -> dict[str, Any]:
        """The decider's record, journaled with the decision: beside a declared name (``--as``),
        the operating-system user and host that declared it."""
        record = self.decider.record()
        if self.decider.how in ASSERTED:
            record["as"] = self.approver
        return record


def decider(principal: Principal | None, approver: str | None, where: str) -> tuple[Principal, str]:
    """Who decides, and the name checked against the approvers. An authenticated principal
    decides as itself (a name beside it is refused: the decider is never a name someone typed);
    the CLI's principal, or none (a program: its operating-system user), decides as ``approver``."""
    if principal is None:
        principal = cli_principal("client")
    if principal.how not in ASSERTED:
        if approver is not None:
            raise InvalidInput(
                f"{where}: approver= is the CLI's --as; with an authenticated principal "
                f"({principal.name}) the decider is the principal"
            )
        return principal, principal.name
    if approver is None:
        raise InvalidInput(
            f"{where}: say who decides: approver= (the CLI's --as), or an authenticated principal="
        )
    return principal, approver


def refuse_unauthenticated(request: dict[str, Any], principal: Principal, where: str) -> None:
    """``DecisionRefused`` when the workflow asked for an authenticated decision
    (``run.approval(..., authenticated=True)``) and ``principal`` only declared a name."""
    if request["authenticated"] and principal.how in ASSERTED:
        raise DecisionForbidden(
            f"{where}: the workflow asked for an authenticated decision, which the {principal.how} cannot "
            "make: decide it in the dashboard (outlast dashboard) or the API, signed in as yourself"
        )


class Verdict(Enum):
    DECIDE = "decide"  # commit it: the request is pending and unexpired
    SAME_AGAIN = "same_again"  # the very decision already taken: accepted, changes nothing


def check_comment(comment: str | None, where: str) -> str:
    """A comment of 1 to ``MAX_COMMENT`` characters, not only blanks."""
    if not comment or not comment.strip() or len(comment) > MAX_COMMENT:
        raise DecisionRefused(f"{where}: a comment of 1 to {MAX_COMMENT} non-blank characters is required")
    return comment


def judge(
    request: dict[str, Any] | None,
    proposed: Proposed,
    run_id: str,
    where: str,
    *,
    run_state: str | None = None,
) -> Verdict:
    """What to do with ``proposed`` on ``request`` (its stored row, with ``expired`` from the
    database clock), or ``DecisionRefused`` naming why. ``run_state`` is given after a commit
    that found nothing to decide: a request still pending then no longer has a waiting run."""
    check_comment(proposed.comment, where)
    if request is None:
        raise DecisionRefused(f"{where}: no such approval request (see: outlast status {run_id})")
    p = proposed.decider
    refuse_unauthenticated(request, p, where)
    if p.how in ASSERTED and proposed.approver not in request["approvers"]:
        raise DecisionForbidden(
            f"{where}: '{proposed.approver}' may not decide (approvers: {', '.join(request['approvers'])})"
        )
    if p.how not in ASSERTED and not p.may(request["approvers"]):
        groups = f" (groups: {', '.join(sorted(p.groups))})" if p.groups else " (no groups)"
        raise DecisionForbidden(
            f"{where}: {p.name}{groups} may not decide (approvers: {', '.join(request['approvers'])})"
        )
    if proposed.args_hash not in ("", request["args_hash"]) and request["args_hash"].startswith(
        proposed.args_hash
    ):
        raise DecisionRefused(
            f"{where}: the args hash {proposed.args_hash} is only the start of the request's; the full "
            f"hash is needed (see: outlast status {run_id})"
        )
    if proposed.args_hash != request["args_hash"]:
        raise DecisionRefused(
            f"{where}: the decision is for other arguments (hash {proposed.args_hash[:12]}, the "
            f"request's is {request['args_hash'][:12]}): the action was altered or the decision "
            "replayed; look again"
        )
    if proposed.new_args is not None:
        check_revision(request["args"], proposed.new_args, where)
    if request["status"] == "pending":
        if request["expired"]:
            raise DecisionRefused(
                f"{where}: the request expired at {request['expires_at']:%Y-%m-%d %H:%M:%S %Z}"
            )
        if run_state is not None:
            raise DecisionRefused(f"{where}: the run is {run_state}, no longer awaiting this approval")
        return Verdict.DECIDE
    taken = (request["status"], request["decided_by"], request["comment"], request["new_args"])
    if taken == (proposed.status, proposed.approver, proposed.comment, proposed.new_args):
        return Verdict.SAME_AGAIN
    raise DecisionRefused(
        f"{where}: already {request['status']} by {request['decided_by']}; a different decision is refused"
    )
