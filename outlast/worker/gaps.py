"""The gap table: an operation whose intention is journaled and whose result is not (its worker
died, or let it go, between the two) is resolved by what the tool promised. A read is redone, an
idempotent tool is dispatched again with the same key, a reconciler is asked, and anything else
is **in doubt**: journaled as such and never dispatched again by the run.

For the same reasons a read's or an idempotent tool's result may be **held** (``holds``): one lost
with its worker is a gap, or nothing journaled at all, and is resolved the same way. A sync call
abandoned when its run's cancellation outlived its grace is settled here too."""

from __future__ import annotations

import contextlib
import traceback
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, NoReturn

from outlast import metrics
from outlast.action import NOT_EXECUTED, Action, reset_action, set_action
from outlast.app import Reconciler, Tool
from outlast.errors import Cancelled, InDoubt
from outlast.journal import jsonable, operation_state
from outlast.secrets import Secrets
from outlast.worker.replayer import Replayer

if TYPE_CHECKING:
    from outlast.worker.dispatcher import Dispatcher


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


class GapTable:
    """One run's resolutions of its gaps; dispatches and in-doubt declarations are its dispatcher's."""

    def __init__(
        self,
        dispatcher: Dispatcher,
        reconcilers: dict[str, Reconciler],
        secrets: Secrets,
        replayer: Replayer,
    ) -> None:
        self._d = dispatcher
        self._reconcilers = reconcilers
        self._secrets = secrets
        self._replayer = replayer

    async def abandon(self, tool: Tool, action: Action, asked: dict[str, Any] | None = None) -> NoReturn:
        """A sync call given up on because its run's cancellation outlived its grace (its thread
        goes on; its late result is refused). A plain or reconciled tool's effect may still land:
        in doubt. A read or an idempotent tool: journaled ``abandoned`` (no result; never
        dispatched again by the run; a read with no intention says there what it asked). Then
        the cancellation itself is journaled and raised."""
        op = action.operation_id
        why = "abandoned: the run was cancelled and the tool had not returned within its grace"
        if tool.effect == "read" or tool.idempotent:
            self._d.log.warning("operation.abandoned", tool=tool.name, operation_id=op, why=why)
            await self._replayer.append("abandoned", op, {"why": why, **(asked or {})})
        else:
            with contextlib.suppress(InDoubt):
                await self.declare_in_doubt(tool, action, why + "; its effect may still land", "")
        await self.cancelled_again(op)

    async def cancelled_again(self, op_id: str) -> NoReturn:
        """An operation abandoned on a cancellation: the cancellation journaled at it (a
        cancellation is never withdrawn: ``go_live`` raises) and raised; never dispatched again."""
        await self._replayer.go_live(op_id)
        raise Cancelled()

    async def resolve(
        self, tool: Tool, args: dict[str, Any], action: Action, reserved: dict[str, float] | None
    ) -> Any:
        """An intention with no result: resolve it as DESIGN.md's table says."""
        op, name = action.operation_id, tool.name
        if operation_state(self._replayer.history(op))[0] == "abandoned":
            await self.cancelled_again(op)  # given up on at its run's cancellation: never again
        say = self._d.log.bind(tool=name, operation_id=op, idempotency_key=action.idempotency_key).info
        if tool.effect == "read":
            say("gap.resolved", how="read: redone")
            metrics.resolution("read_redone")
            return await self._d.dispatch(tool, args, action, how="read: redone", reserved=reserved)
        if tool.idempotent:
            say("gap.resolved", how="idempotent: same key")
            metrics.resolution("idempotent_same_key")
            return await self._d.dispatch(tool, args, action, how="idempotent: same key", reserved=reserved)
        reconcile = self._reconcilers.get(name)
        if reconcile is not None:
            token = set_action(action)
            try:
                answer = reconcile(args, action)
                if isinstance(answer, Awaitable):
                    answer = await answer
            except Exception as exc:
                metrics.resolution("reconciler_raised")
                redact = self._secrets.redact
                why = redact(name, args, f"reconciler raised {type(exc).__name__}: {exc}")
                return await self.declare_in_doubt(
                    tool, action, why, redact(name, args, traceback.format_exc())
                )
            finally:
                reset_action(token)
            if answer is NOT_EXECUTED:
                say("gap.resolved", how="reconciler: not executed")
                metrics.resolution("reconciler_not_executed")
                # No resolution entry: should this dispatch die too, the op is a gap again and
                # the reconciler is asked again (it would then say executed), never skipped.
                return await self._d.dispatch(
                    tool, args, action, how="reconciler: not executed", reserved=reserved
                )
            say("gap.resolved", how="reconciler: executed")
            metrics.resolution("reconciler_executed")
            ok = self._secrets.scrub(jsonable(answer, self._d.max_payload))
            payload = {"ok": ok, "how": "reconciler: executed"}
            await self._replayer.append("result", op, payload)
            return payload["ok"]
        metrics.resolution("in_doubt")
        why = "no idempotency key promise and no reconciler"
        return await self.declare_in_doubt(tool, action, why, "")

    async def declare_in_doubt(self, tool: Tool, action: Action, why: str, tb: str) -> Any:
        """Not executed again: the operation is journaled in doubt, and the workflow told so."""
        why, tb = self._secrets.scrub(why), self._secrets.scrub(tb)
        self._d.log.warning("operation.in_doubt", tool=tool.name, operation_id=action.operation_id, why=why)
        await self._replayer.append("in_doubt", action.operation_id, {"why": why, "traceback": tb})
        metrics.in_doubt(tool.name)
        self._d.in_doubt.add(tool.name)
        raise InDoubt(self._d.run_id, action.operation_id, tool.name)
