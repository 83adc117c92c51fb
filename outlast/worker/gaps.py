"""The gap table: an operation whose intention is journaled and whose result is not (its worker
died, or let it go, between the two) is resolved by what the tool promised. A read is redone, an
idempotent tool is dispatched again with the same key, a reconciler is asked, and anything else
is **in doubt**: journaled as such and never dispatched again by the run."""

from __future__ import annotations

import json
import traceback
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from outlast import metrics
from outlast.action import NOT_EXECUTED, Action, reset_action, set_action
from outlast.app import Reconciler, Tool
from outlast.journal import canonical
from outlast.secrets import Secrets
from outlast.worker.replayer import Replayer

if TYPE_CHECKING:
    import structlog

    from outlast.worker.dispatcher import Dispatcher


class GapTable:
    """One run's resolutions of its gaps; dispatches and in-doubt declarations are its dispatcher's."""

    def __init__(
        self,
        dispatcher: Dispatcher,
        reconcilers: dict[str, Reconciler],
        secrets: Secrets,
        replayer: Replayer,
        log: structlog.stdlib.BoundLogger,
    ) -> None:
        self._d = dispatcher
        self._reconcilers = reconcilers
        self._secrets = secrets
        self._replayer = replayer
        self._log = log

    async def resolve(
        self, tool: Tool, args: dict[str, Any], action: Action, reserved: dict[str, float] | None
    ) -> Any:
        """An intention with no result: resolve it as DESIGN.md's table says."""
        op, name = action.operation_id, tool.name
        say = self._log.bind(tool=name, operation_id=op, idempotency_key=action.idempotency_key).info
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
                return await self._d.declare_in_doubt(
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
            ok = self._secrets.scrub(json.loads(canonical(answer, self._d.max_payload)))
            payload = {"ok": ok, "how": "reconciler: executed"}
            await self._replayer.append("result", op, payload)
            return payload["ok"]
        metrics.resolution("in_doubt")
        why = "no idempotency key promise and no reconciler"
        return await self._d.declare_in_doubt(tool, action, why, "")
