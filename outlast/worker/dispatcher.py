"""The dispatcher takes one operation from its intention to its result, and applies the gap table.

Live, an operation is checked (policy, budget reservation, a proven lease), its **intention** is
committed, the tool is dispatched with the operation's idempotency key, and its **result** is
committed before the workflow goes on; a read's or an idempotent tool's is **held** instead
(``holds``, ``Replayer.hold``), and a read has no intention. On a takeover, an operation with an
intention and no result is resolved by the gap table (``gaps.py``): a read is redone, an idempotent
tool dispatched again with the same key, a reconciler asked, and anything else is **in doubt**.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Mapping
from typing import Any

import structlog

from outlast import _failpoints as failpoints, _logs as logs, _metrics as metrics, _tracing as tracing
from outlast._journal import Unstorable, args_hash, jsonable, operation_state
from outlast._payloads import too_large
from outlast.action import Action, reset_action, set_action
from outlast.app import Tool
from outlast.errors import InDoubt, PolicyRefused, RateLimited, ToolError, ToolTimeout
from outlast.store.artifacts import Artifacts
from outlast.store.budgets import Budgets
from outlast.store.journal import Journal
from outlast.worker.admission import OperationAdmission
from outlast.worker.artifacts import RunArtifacts
from outlast.worker.captures import Captures
from outlast.worker.control import Abandoned, JournalEnd
from outlast.worker.flow import no_check
from outlast.worker.gaps import GapTable, Reconciled, Redo, holds
from outlast.worker.op import Op
from outlast.worker.replayer import asked_by_result, describe
from outlast.worker.scope import RunScope
from outlast.worker.tools import error_payload, invoke

log = structlog.get_logger("outlast.run")


class Dispatcher:
    """The ``Dispatcher`` makes the tool calls of one run: replayed, resolved after a crash, or made
    live."""

    def __init__(
        self,
        scope: RunScope,
        *,
        budgets: Budgets,
        journal: Journal,
        handle: Callable[[], Any],
        may_park: Callable[[], bool],
        artifacts: Artifacts,
    ) -> None:
        self.run_id = scope.run_id
        self.budget_id = scope.record.budget_id
        self.max_payload = scope.max_payload  # the largest result stored
        self.in_doubt: set[str] = set()  # tools with an operation declared in doubt in this run
        self.may_park = may_park  # no other crossing of the run under way: a long wait may park it
        self._app = scope.app
        self._budgets = budgets
        self._control = scope.control
        self._writes = scope.writes
        self._replayer = replayer = scope.replayer
        self._secrets = scope.secrets
        self._captures = Captures(journal, self.run_id, scope.secrets, replayer.journal.length)
        self._gate, self._live = scope.gate, scope.live  # live: where its tools' chunks go (LiveOutput)
        self._admission = OperationAdmission(scope, budgets=budgets, handle=handle)  # handle: the run
        self._gaps = GapTable(scope, self.in_doubt)
        # where its tools' (and its workflow's) artifacts go
        self.saver = RunArtifacts(artifacts, scope.writes, scope.control, replayer)

    @functools.cached_property
    def log(self) -> Any:
        """The run's logger, bound on first use: building one costs more than most runs log here."""
        return log.bind(run_id=self.run_id, fencing_token=self._control.token)

    def op(self, op_id: str, tool: Tool, args: dict[str, Any], ahash: str | None = None) -> Op:
        """The operation at ``op_id``: its arguments sealed once (``ahash``: a compensation's, of
        its arguments as given)."""
        sealed = self._secrets.seal(tool.name, args)
        ahash = args_hash(sealed) if ahash is None else ahash
        return Op(op_id, tool, args, sealed, ahash, f"{self.run_id}:{op_id}", tool.name)

    async def call(self, op_id: str, tool_name: str, args: dict[str, Any]) -> Any:
        """One tool call at its position: served from the journal, or live: policy, budget,
        lease, intention, dispatch, result. Secret arguments are journaled as their keyed hash
        (``sealed``); the tool is given the call's own values."""
        tool = self._app.get_tool(tool_name)
        clean = tool.validate(args)  # an invalid call never reaches the journal
        self._replayer.enter(op_id)
        op = self.op(op_id, tool, clean)
        if self._replayer.journaled(op_id):
            kinds = self._replayer.journal.ops[op_id]
            first = kinds.get("intention") or kinds.get("refused") or asked_by_result(kinds)
            if first is None or not self._secrets.same_call(first.fields, tool_name, clean, op.args_hash):
                changed = self._secrets.changed(tool_name, first.data["args"], op.sealed) if first else ""
                raise self._replayer.mismatch(op_id, describe(tool_name, op.sealed) + changed, op.args_hash)
            if first.kind == "refused":
                raise PolicyRefused(self.run_id, tool_name, first.data["reason"])
            return await self.replay(op)
        with tracing.operation(self.run_id, op_id, tool_name, self._control.token):
            if not holds(tool):  # its held results written, a cancellation is known before it
                await self._writes.flush()
            await self._replayer.go_live(op_id, lambda: describe(tool_name, op.sealed))
            await self._admission.policy(op)
            check = functools.partial(self._replayer.go_live, op_id)
            async with self._gate.operation(tool, op_id, check, self.may_park):
                # Reserved once admitted: a wait for a slot or a rate that ends the run (a
                # cancellation, the deadline, a park) leaves no reservation behind.
                reserved = await self._admission.reserve(op)
                return await self.dispatch_new(op, reserved)

    async def dispatch_new(self, op: Op, reserved: dict[str, float]) -> Any:
        action = self._action(op)
        started = time.perf_counter()
        await self._control.lease_proven(f"{op.name} ({op.id})")
        failpoints.hit("before_intention", op.name)
        token = self._control.token  # the timeline names who wrote each crossing
        if op.tool.effect == "read" and holds(op.tool):
            failpoints.hit("after_intention", op.name)  # no intention: the same point
            at = self._replayer.db_now().isoformat()
            asked = {
                "tool": op.name,
                "args": op.sealed,
                "args_hash": op.args_hash,
                "started": at,
                "token": token,
            }
            return await self.dispatch(op, action, started=started, asked=asked)
        intention = {
            "tool": op.name,
            "args": op.sealed,
            "args_hash": op.args_hash,
            "key": op.key,
            "token": token,
        }
        if reserved:
            intention["reserved"] = reserved
        await self._replayer.append("intention", op.id, intention)
        failpoints.hit("after_intention", op.name)
        return await self.dispatch(op, action, reserved=reserved, started=started)

    def _action(self, op: Op) -> Action:
        saver, loop = self.saver, asyncio.get_running_loop()
        token = self._control.token
        return Action(self.run_id, op.id, op.name, op.key, token, live=self._live, artifacts=saver, loop=loop)

    async def dispatch(
        self,
        op: Op,
        action: Action,
        how: str = "",
        reserved: dict[str, float] | None = None,
        started: float | None = None,
        asked: dict[str, Any] | None = None,
    ) -> Any:
        started = time.perf_counter() if started is None else started  # live: before the intention
        tool, args = op.tool, op.args
        held = holds(tool) and not how
        if not held:  # nothing goes to a plain or reconciled tool while a result is held
            await self._writes.flush()
        # Checked again here, after the intention's commit (which may have waited out an outage),
        # and on every re-dispatch of a gap: never dispatch on a lease not proven.
        await self._control.lease_proven(f"{tool.name} ({op.id})")
        token = set_action(action)
        self._control.dispatching += 1
        unknown = ""  # why the operation's outcome cannot be journaled as a plain result
        try:
            # A span holds the arguments as journaled (secrets sealed), never the call's own values.
            # Its result, as journaled: with every secret value the run knows scrubbed out.
            if logs.payloads():  # logged as the span holds them
                self.log.info("operation.dispatched", operation_id=op.id, args=op.sealed)
            with tracing.tool_call(tool, action, op.sealed) as span:
                result = await self._invoke(op, action, asked)
                await action.saved()  # its artifacts stored before its result is journaled
                try:
                    ok = self._secrets.scrub(jsonable(result, self._writes.referenced or self.max_payload))
                    payload: dict[str, Any] = {"ok": ok}
                    span.result(ok)
                    if logs.payloads():
                        self.log.info("operation.returned", operation_id=op.id, result=ok)
                except Unstorable as exc:
                    exc = too_large(self.run_id, f"the result of {tool.name} ({op.id})", exc)
                    payload = {"error": error_payload(exc, self._secrets.scrub(str(exc)))}
                    unknown = f"it returned, but its result cannot be stored ({exc})"
        except Exception as exc:
            message = self._secrets.redact(tool.name, args, str(exc))  # stored and logged only so
            payload = {"error": error_payload(exc, message)}
            if isinstance(exc, ToolTimeout):
                unknown = f"timed out after {tool.timeout:g}s; its effect may still land"
            self.log.info("tool.raised", tool=tool.name, operation_id=op.id, error=message)
        finally:
            self._control.dispatching -= 1
            reset_action(token)
        if action.captured:  # what the tool sent, journaled before its outcome
            await self._captures.journal(self._replayer, tool, args, action)
        if unknown and tool.effect != "read" and not tool.idempotent:
            # Given up on, or done with a result that cannot be kept: not a plain failure, which
            # a retry or a compensation would take at its word. Only a read or a tool that
            # honours its idempotency key may report it as a failure.
            metrics.operation(tool.name, "in_doubt", started)
            return await self._gaps.declare_in_doubt(op, action, unknown, "")
        failpoints.hit("after_effect", tool.name)
        if how:
            payload["how"] = how
        payload.update(asked or {})  # a read's: what was asked, as its intention would say
        charged = self.budget_id is not None and bool(reserved or action.charges)
        if held and not charged:
            await self._replayer.hold("result", op.id, payload)
            failpoints.hit("with_result_held", tool.name)
            failpoints.hit("after_result", tool.name)  # the same point, for a result held
            metrics.operation(tool.name, "error" if "error" in payload else "ok", started)
            return self._outcome(tool.name, payload)
        appended = self._replayer.append("result", op.id, payload)
        if charged and self.budget_id is not None:
            # What the tool charged replaces the estimate, name by name; the rest of it stands.
            actual = {**(reserved or {}), **action.charges}
            settle = self._budgets.settle(self.budget_id, self.run_id, op.id, actual, expected=bool(reserved))
            settled = self._control.db(settle)
            await asyncio.gather(appended, settled)  # one shared commit, as a rule
        else:
            await appended
        failpoints.hit("after_result", tool.name)
        if tool.rates:
            await self._gate.settle(tool, op.id, action.charges)
        metrics.operation(tool.name, "error" if "error" in payload else "ok", started)
        return self._outcome(tool.name, payload)

    async def _invoke(self, op: Op, action: Action, asked: Any = None) -> Any:
        """The tool, tried again (same key) after each ``RateLimited`` it raises: not an attempt,
        a wait; every worker holds the tool back meanwhile. A compensation is never abandoned."""
        awaited = None if op.id.startswith("undo-") else self._control.sync_calls
        while True:
            try:
                return await invoke(op.tool, op.args, awaited)
            except RateLimited as exc:
                say = self.log.info
                say("tool.rate_limited", tool=op.name, operation_id=op.id, retry_after=exc.retry_after)
                await self._gate.back_off(op.tool, op.id, exc.retry_after)
                await self._control.lease_proven(f"{op.name} ({op.id})")
            except Abandoned:  # the run's cancellation outlived its grace while the sync tool ran
                await self._gaps.abandon(op, action, asked)  # a read's: what it asked

    def _outcome(self, tool: str, payload: Mapping[str, Any]) -> Any:
        if "error" in payload:
            err = payload["error"]
            raise ToolError(tool, err["type"], err["message"])
        return payload["ok"]

    async def replay(self, op: Op) -> Any:
        op_id, tool = op.id, op.tool
        state, last = operation_state(self._replayer.history(op_id))
        if state == "done" and last is not None:  # a read's result is its own first entry
            if last.kind == "result":
                value = self._outcome(tool.name, last.fields)  # raises the tool's error
                # The workflow may change what it is given: a container is a fresh copy.
                return last.data["ok"] if isinstance(value, (dict, list)) else value
            return last.data.get("result")  # resolved: it was executed
        if state == "in_doubt":
            self.in_doubt.add(tool.name)
            if self._control.cancel.is_set():
                await self._replayer.go_live(op_id)
            raise InDoubt(self.run_id, op_id, tool.name)
        if self._control.offline:  # an offline replay resolves no gap: nothing is dispatched
            said = describe(tool.name, op.sealed)
            raise JournalEnd(op_id, f"{said}, journaled with no result (a gap to resolve)")
        with tracing.operation(self.run_id, op_id, tool.name, self._control.token, resumed=True):
            # A re-dispatch after a crash is a dispatch too: its slot and rate first.
            async with self._gate.operation(tool, op_id, no_check):
                return await self._resume(op, state)

    async def _resume(self, op: Op, state: str) -> Any:
        """An operation the journal leaves open: resolved as not executed by a person, or a gap."""
        intention = self._replayer.entry(op.id, "intention")
        reserved = intention.data.get("reserved") if intention is not None else None
        action = self._action(op)
        if state == "cleared":
            # Resolved as not executed: run it once. The re-dispatch is journaled first, so that a
            # crash during it is a gap again, resolved by the table, never a second free run.
            await self._replayer.append("redispatch", op.id, {"how": "resolved not executed"})
            metrics.resolution("resolved_not_executed")
            how = "resolved not executed: run once"
            return await self.dispatch(op, action, how=how, reserved=reserved)
        decision = await self._gaps.resolve(op, action)
        if isinstance(decision, Redo):
            return await self.dispatch(op, action, how=decision.how, reserved=reserved)
        if isinstance(decision, Reconciled):
            ok = self._secrets.scrub(jsonable(decision.value, self.max_payload))
            await self._replayer.append("result", op.id, {"ok": ok, "how": "reconciler: executed"})
            return ok
        return await self._gaps.declare_in_doubt(op, action, decision.why, decision.traceback)
