"""outlast's errors are one hierarchy: every refusal and failure is an ``OutlastError`` that names
the run and the way out."""

from __future__ import annotations

from typing import Any


class OutlastError(Exception):
    """``OutlastError`` is the root of every error outlast raises on purpose."""


class ConfigError(OutlastError):
    """Settings are missing or wrong (e.g. no server reachable and nothing embedded)."""


class ServiceUnavailable(OutlastError):
    """Postgres or Redis could not be reached; the message names the URL, never the password."""


class SchemaError(OutlastError):
    """The database schema is missing or newer than this outlast knows."""


class WorkersDying(OutlastError):
    """A worker pool's processes keep dying before they serve: the pool stopped."""


class DemoFailed(OutlastError):
    """``outlast demo`` could not tell its story; the message says where it stopped."""


class UnknownRun(OutlastError):
    """No run has this id."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"no run '{run_id}' (list runs with: outlast runs)")
        self.run_id = run_id


class UnknownWorkflow(OutlastError):
    """The app registers no workflow of this name."""


class UnknownTool(OutlastError):
    """The app registers no tool of this name."""


class RunConflict(OutlastError):
    """An enqueue came with an existing run id but another workflow, input, tenant or priority."""

    def __init__(self, run_id: str, what: str) -> None:
        super().__init__(
            f"run '{run_id}' already exists with a different {what}; use another run id, or the "
            "same workflow, input, tenant and priority to get the existing run"
        )
        self.run_id = run_id


class Failure(OutlastError):
    """Raised by a workflow, ``Failure`` ends its run ``failed`` with the message as its reason: a
    failure the workflow means (a card declined), where any other exception of its code is a bug
    and parks the run until a fix is deployed (``@app.workflow(fails_on=...)`` lists more)."""


class InvalidInput(OutlastError):
    """The input cannot be accepted (not a JSON object, bad tool arguments, ...)."""


class MessageRefused(OutlastError):
    """A message not stored: ``refusal`` is why (``unknown`` run, ``final`` run, ``too_large``,
    ``full``: too many untaken); the message names the run and the channel."""

    def __init__(self, message: str, refusal: str) -> None:
        super().__init__(message)
        self.refusal = refusal


class Fenced(OutlastError):
    """A write carried a stale fencing token: another worker owns the run now."""

    def __init__(self, run_id: str, token: int) -> None:
        super().__init__(
            f"run '{run_id}': fencing token {token} is stale, another worker owns the run; "
            "this worker abandons it"
        )
        self.run_id = run_id
        self.token = token


class RunFinished(OutlastError):
    """The run is final: a final state never changes, and a finished run is never resumed."""


class RunNotFinished(OutlastError):
    """Only a finished run can be continued in a new one; this one goes on by itself."""


class RunNotWaiting(OutlastError):
    """The run does not wait for what the request answers (an in-doubt operation, a resume)."""


class RunChanged(OutlastError):
    """The run moved on between reading it and writing to it; nothing was written: look again."""


class NotInDoubt(OutlastError):
    """A resolution names an operation that is not in doubt."""


class UnknownSchedule(OutlastError):
    """No worker has declared a schedule of this name."""

    def __init__(self, name: str) -> None:
        super().__init__(
            f"no schedule '{name}' (list them with: outlast schedules; a schedule is recorded by the "
            f"first sweep of a worker whose app declares it)"
        )


class UnknownApproval(OutlastError):
    """The run has no approval request of this id."""

    def __init__(self, run_id: str, approval_id: str) -> None:
        super().__init__(
            f"run '{run_id}' has no approval request {approval_id} (see: outlast status {run_id})"
        )
        self.run_id = run_id
        self.approval_id = approval_id


class WaitTimeout(OutlastError):
    """``Client.wait`` gave up before the run finished (the run goes on)."""


class ResumeRefused(OutlastError):
    """Resume refused; the run is left intact and waits with the reason."""

    reason = "resume_refused"


class ProgramChanged(ResumeRefused):
    """The workflow's code fingerprint differs from the one the run was admitted with."""

    reason = "program_changed"


class PayloadChanged(OutlastError):
    """A value held by reference (a run's input or result, a message) that the payload store no
    longer has as it was stored."""


class JournalAltered(ResumeRefused):
    """The journal's SHA-256 chain no longer verifies."""

    reason = "journal_altered"

    def __init__(self, run_id: str, crossing: int) -> None:
        super().__init__(
            f"run '{run_id}': journal altered at crossing #{crossing}; "
            f"inspect it with: outlast verify {run_id}"
        )
        self.crossing = crossing


class ResumeImpossible(ResumeRefused):
    """What the program asks now differs from what the journal holds."""

    reason = "resume_impossible"

    def __init__(
        self,
        run_id: str,
        crossing: int,
        journal: str,
        program: str,
        *,
        operation: str | None = None,
        journal_hash: str | None = None,
        program_hash: str | None = None,
    ) -> None:
        super().__init__(
            f"run '{run_id}': resume impossible at crossing #{crossing}: "
            f"journal has {journal}, program asks {program}"
        )
        self.run_id = run_id
        self.crossing = crossing
        self.operation = operation
        self.journal = journal  # what the journal holds at the crossing
        self.program = program  # what the code asks there
        self.journal_hash = journal_hash  # the arguments hash journaled (a call, an approval)
        self.program_hash = program_hash  # the arguments hash of what the code asks


class InDoubt(OutlastError):
    """An operation may or may not have happened; nothing will run it again silently."""

    def __init__(self, run_id: str, operation_id: str, tool: str) -> None:
        super().__init__(
            f"run '{run_id}': operation {operation_id} ({tool}) is in doubt: it may have happened. "
            f"Resolve it with: outlast resolve {run_id} {operation_id} --executed [--result JSON] "
            "or --not-executed"
        )
        self.run_id = run_id
        self.operation_id = operation_id
        self.tool = tool


class ChildFailed(OutlastError):
    """A child run (``run.start``) ended other than succeeded or partial; raised in the parent at
    ``child.result()``, where the workflow may catch it."""

    def __init__(self, child_id: str, workflow: str, state: str, reason: str | None) -> None:
        super().__init__(
            f"child run '{child_id}' ({workflow}) ended {state}"
            + (f": {reason}" if reason else "")
            + f"; see it with: outlast status {child_id}"
        )
        self.child_id = child_id
        self.workflow = workflow
        self.state = state
        self.reason = reason


class ToolError(OutlastError):
    """A tool raised; its error is journaled as its result, so replay raises it again."""

    def __init__(self, tool: str, type_name: str, message: str, detail: Any = None) -> None:
        super().__init__(f"tool '{tool}' raised {type_name}: {message}")
        self.tool = tool
        self.type_name = type_name
        self.message = message
        self.detail = detail


class ToolTimeout(OutlastError, TimeoutError):
    """A tool did not return within its ``timeout``: given up on, its effect may still land."""


class PolicyRefused(OutlastError):
    """The app's policy refused a dispatch; the refusal is journaled."""

    def __init__(self, run_id: str, tool: str, reason: str) -> None:
        super().__init__(f"run '{run_id}': policy refused {tool}: {reason}")
        self.tool = tool
        self.reason = reason


class BudgetExhausted(OutlastError):
    """A dispatch would exceed a budget limit: it is not made and the run ends ``exhausted``."""

    def __init__(self, run_id: str, tool: str, over: list[dict[str, Any]]) -> None:
        parts = ", ".join(
            f"{o['name']} (limit {o['limit_value']}, spent {o['spent']}, reserved {o['reserved']}, "
            f"{tool} needs {o['amount']})"
            for o in over
        )
        super().__init__(f"run '{run_id}': budget exhausted: {parts}")
        self.limits = [o["name"] for o in over]


class TimedOut(OutlastError):
    """A time limit passed (the run's deadline, a decision's or an answer's expiry); uncaught, the
    run ends ``timed_out``."""


class DeadlineExceeded(TimedOut):
    """The run's deadline passed: it ends ``timed_out``."""


class ApprovalRejected(OutlastError):
    """The approver rejected the action; uncaught, the run ends ``failed``."""


class ApprovalExpired(TimedOut):
    """Nobody decided before the request expired; uncaught, the run ends ``timed_out``."""


class DecisionRefused(OutlastError):
    """The decision cannot be accepted: wrong approver, altered action, expired, contradictory."""


class DecisionForbidden(DecisionRefused):
    """The decider may not make this decision: not among the request's approvers, or a declared
    name where the workflow asked for an authenticated decision."""


class RequestExpired(TimedOut):
    """Nobody answered a request (``run.request``) before it expired; uncaught, the run ends
    ``timed_out``."""


class AnswerRefused(OutlastError):
    """An answer to a request that cannot be accepted: no such request, a value that does not fit
    the response type, expired, the run no longer waiting, or a different answer to one answered."""


class AnswerForbidden(AnswerRefused):
    """The responder is not among the request's responders."""


class PartialRefused(OutlastError):
    """A workflow that does not accept partial results returned a ``Partial``: the run fails."""


class Cancelled(BaseException):
    """``Cancelled`` is raised at a crossing once the run's cancellation was requested. A
    BaseException, so that a workflow's ``except Exception`` cannot swallow it."""


class RateLimited(Exception):
    """A tool raises ``RateLimited`` when its service refused it for now (an HTTP 429): the dispatch
    is tried again after ``retry_after`` seconds, with the same idempotency key, without counting an
    attempt; every worker holds that tool back meanwhile."""

    def __init__(self, retry_after: float = 1.0, message: str = "") -> None:
        super().__init__(message or f"rate limited; retry after {retry_after:g}s")
        self.retry_after = max(float(retry_after), 0.0)
