"""The rules of an approval decision, in one place: who may decide, on what, with what comment,
and what a decision sent again or too late means. The client applies them (``judge``) before
and after committing a decision; the store commits it; the worker journals it on resume.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

from outlast.errors import DecisionRefused

MAX_COMMENT = 500
DECISIONS = ("approved", "rejected", "revised")


@dataclass(frozen=True)
class Proposed:
    """A decision as a person sends it: what, by whom, why, on which arguments (their hash, as
    the approver saw it) and, for ``revised``, the new arguments."""

    status: str
    approver: str
    comment: str
    args_hash: str
    new_args: dict[str, Any] | None = None


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
    if proposed.approver not in request["approvers"]:
        raise DecisionRefused(
            f"{where}: '{proposed.approver}' may not decide (approvers: {', '.join(request['approvers'])})"
        )
    if proposed.args_hash != request["args_hash"]:
        raise DecisionRefused(
            f"{where}: the decision is for other arguments (hash {proposed.args_hash[:12]}, the "
            f"request's is {request['args_hash'][:12]}): the action was altered or the decision "
            "replayed; look again"
        )
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
