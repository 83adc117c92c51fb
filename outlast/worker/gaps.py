"""The gap table resolves an operation whose intention is journaled and whose result is not (its
worker died, or let it go, between the two) by what the tool promised. A read is redone, an
idempotent tool is dispatched again with the same key, a reconciler is asked, and anything else
is **in doubt**: journaled as such and never dispatched again by the run.

For the same reasons a read's or an idempotent tool's result may be **held** (``holds``): one lost
with its worker is a gap, or nothing journaled at all, and is resolved the same way. A sync call
abandoned when its run's cancellation outlived its grace is settled here too.

The table decides (``resolve`` returns a ``Decision``: ``Redo``, ``Reconciled`` or ``Doubtful``);
the dispatcher carries the decision out (a dispatch, a result journaled, an in-doubt declaration).
Nothing here dispatches, so nothing here imports the dispatcher."""

from __future__ import annotations

import contextlib
import functools
import traceback
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any, NoReturn

import structlog

from outlast import _metrics as metrics
from outlast._journal import operation_state
from outlast.action import NOT_EXECUTED, Action, reset_action, set_action
from outlast.app import Tool
from outlast.errors import Cancelled, InDoubt
from outlast.worker.op import Op
from outlast.worker.scope import RunScope

log = structlog.get_logger("outlast.run")


def holds(tool: Tool) -> bool:
    """Whether the tool's result may be held: a read's or an idempotent tool's (lost, it is redone
    or dispatched again with its key), never one that costs, is rate limited or capped (their
    settlement and accounting are committed with the result, as before)."""
    return (
        (tool.effect == "read" or tool.idempotent)
        and not tool.cost
        and not tool.rates
        and tool.max_concurrent is None
    )


@dataclass(frozen=True, slots=True)
class Redo:
    """``Redo`` says to dispatch the operation again, with its own idempotency key (``how``: a read
    redone, an idempotent tool with the same key, or a reconciler that says it was not executed)."""

    how: str


@dataclass(frozen=True, slots=True)
class Reconciled:
    """The reconciler says the operation was executed, and what it returned: journaled as its result."""

    value: Any


@dataclass(frozen=True, slots=True)
class Doubtful:
    """Nothing can tell whether the effect landed: the operation is declared in doubt."""

    why: str
    traceback: str = ""


Decision = Redo | Reconciled | Doubtful


class GapTable:
    """One run's decisions on its gaps, and its in-doubt and abandoned declarations; the dispatcher
    carries the decisions out."""

    def __init__(self, scope: RunScope, in_doubt: set[str]) -> None:
        self._control = scope.control
        self._reconcilers = scope.app.reconcilers
        self._secrets = scope.secrets
        self._replayer = scope.replayer
        self._in_doubt = in_doubt  # the dispatcher's: tools with an operation declared in doubt

    @functools.cached_property
    def log(self) -> Any:
        """The run's logger, bound on first use (few runs have a gap)."""
        return log.bind(run_id=self._control.run_id, fencing_token=self._control.token)

    async def abandon(self, op: Op, action: Action, asked: dict[str, Any] | None = None) -> NoReturn:
        """A sync call given up on because its run's cancellation outlived its grace (its thread
        goes on; its late result is refused). A plain or reconciled tool's effect may still land:
        in doubt. A read or an idempotent tool: journaled ``abandoned`` (no result; never
        dispatched again by the run; a read with no intention says there what it asked). Then
        the cancellation itself is journaled and raised."""
        tool = op.tool
        why = "abandoned: the run was cancelled and the tool had not returned within its grace"
        if tool.effect == "read" or tool.idempotent:
            self.log.warning("operation.abandoned", tool=tool.name, operation_id=op.id, why=why)
            await self._replayer.append("abandoned", op.id, {"why": why, **(asked or {})})
        else:
            with contextlib.suppress(InDoubt):
                await self.declare_in_doubt(op, action, why + "; its effect may still land", "")
        await self.cancelled_again(op.id)

    async def cancelled_again(self, op_id: str) -> NoReturn:
        """An operation abandoned on a cancellation: the cancellation journaled at it (a
        cancellation is never withdrawn: ``go_live`` raises) and raised; never dispatched again."""
        await self._replayer.go_live(op_id)
        raise Cancelled()

    async def resolve(self, op: Op, action: Action) -> Decision:
        """An intention with no result: what the tool promised decides (the module's words). One
        abandoned at its run's cancellation is never dispatched again: the cancellation is raised."""
        tool, name, args = op.tool, op.name, op.args
        if operation_state(self._replayer.history(op.id))[0] == "abandoned":
            await self.cancelled_again(op.id)  # given up on at its run's cancellation: never again
        say = self.log.bind(tool=name, operation_id=op.id, idempotency_key=op.key).info
        if tool.effect == "read":
            say("gap.resolved", how="read: redone")
            metrics.resolution("read_redone")
            return Redo("read: redone")
        if tool.idempotent:
            say("gap.resolved", how="idempotent: same key")
            metrics.resolution("idempotent_same_key")
            return Redo("idempotent: same key")
        reconcile = self._reconcilers.get(name)
        if reconcile is None:
            metrics.resolution("in_doubt")
            return Doubtful("no idempotency key promise and no reconciler")
        token = set_action(action)
        try:
            answer = reconcile(args, action)
            if isinstance(answer, Awaitable):
                answer = await answer
        except Exception as exc:
            metrics.resolution("reconciler_raised")
            redact = self._secrets.redact
            why = redact(name, args, f"reconciler raised {type(exc).__name__}: {exc}")
            return Doubtful(why, redact(name, args, traceback.format_exc()))
        finally:
            reset_action(token)
        if answer is NOT_EXECUTED:
            say("gap.resolved", how="reconciler: not executed")
            metrics.resolution("reconciler_not_executed")
            # No resolution entry: should this dispatch die too, the op is a gap again and
            # the reconciler is asked again (it would then say executed), never skipped.
            return Redo("reconciler: not executed")
        say("gap.resolved", how="reconciler: executed")
        metrics.resolution("reconciler_executed")
        return Reconciled(answer)

    async def declare_in_doubt(self, op: Op, action: Action, why: str, tb: str) -> Any:
        """Not executed again: the operation is journaled in doubt, and the workflow told so."""
        why, tb = self._secrets.scrub(why), self._secrets.scrub(tb)
        self.log.warning("operation.in_doubt", tool=op.name, operation_id=op.id, why=why)
        await self._replayer.append("in_doubt", op.id, {"why": why, "traceback": tb})
        metrics.in_doubt(op.name)
        self._in_doubt.add(op.name)
        raise InDoubt(self._control.run_id, op.id, op.name)
