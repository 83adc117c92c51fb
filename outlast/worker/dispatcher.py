"""The dispatcher: one operation from its intention to its result, and the gap table.

Live, an operation is checked (policy, budget reservation, a proven lease), its **intention** is
committed, the tool is dispatched with the operation's idempotency key, and its **result** is
committed before the workflow goes on. On a takeover, an operation with an intention and no
result is resolved by the gap table (``gaps.py``): a read is redone, an idempotent tool is
dispatched again with the same key, a reconciler is asked, and anything else is **in doubt**.
"""

from __future__ import annotations

import asyncio
import functools
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from outlast import failpoints, logs, metrics, tracing
from outlast.action import Action, reset_action, set_action
from outlast.app import App, Tool
from outlast.errors import BudgetExhausted, InDoubt, PolicyRefused, RateLimited, ToolError, ToolTimeout
from outlast.journal import Unstorable, args_hash, canonical, operation_state, storable
from outlast.model import Run as RunRecord
from outlast.secrets import Secrets
from outlast.store import Store
from outlast.worker.captures import journal_capture
from outlast.worker.control import JournalEnd, RunControl
from outlast.worker.flow import Gate
from outlast.worker.gaps import GapTable
from outlast.worker.replayer import Replayer, describe
from outlast.worker.tools import invoke

log = structlog.get_logger("outlast.run")


def _error_payload(exc: BaseException, message: str | None = None) -> dict[str, Any]:
    return {"type": type(exc).__name__, "message": storable(str(exc) if message is None else message)}


class Dispatcher:
    """Tool calls of one run: replayed, resolved after a crash, or made live."""

    def __init__(
        self,
        record: RunRecord,
        app: App,
        store: Store,
        control: RunControl,
        replayer: Replayer,
        secrets: Secrets,
        max_payload: int | None = None,
        gate: Gate | None = None,
    ) -> None:
        self.run_id = record.id
        self.budget_id = record.budget_id
        self.max_payload = max_payload  # the largest result stored
        self.in_doubt: set[str] = set()  # tools with an operation declared in doubt in this run
        self.handle: Any = None  # the workflow's ``run``, handed to the policy hook
        self.alone: Callable[[], bool] = lambda: False  # no other crossing of the run under way
        self._app = app
        self._store = store
        self._control = control
        self._replayer = replayer
        self._secrets = secrets
        self._gate = gate or Gate(store, None, control, control.ttl)
        self._log = log.bind(run_id=record.id, fencing_token=control.token)
        self._gaps = GapTable(self, app.reconcilers, secrets, replayer, self._log)

    async def call(self, op_id: str, tool_name: str, args: dict[str, Any]) -> Any:
        """One tool call at its position: served from the journal, or live: policy, budget,
        lease, intention, dispatch, result. Secret arguments are journaled as their keyed hash
        (``sealed``); the tool is given the call's own values."""
        tool = self._app.get_tool(tool_name)
        clean = tool.validate(args)  # an invalid call never reaches the journal
        self._replayer.enter(op_id)
        sealed = self._secrets.seal(tool_name, clean)
        ahash = args_hash(sealed)
        if self._replayer.journaled(op_id):
            kinds = self._replayer.journal.ops[op_id]
            first = kinds.get("intention") or kinds.get("refused")
            if first is None or (first.data["tool"], first.data["args_hash"]) != (tool_name, ahash):
                changed = self._secrets.changed(tool_name, first.data["args"], sealed) if first else ""
                raise self._replayer.mismatch(op_id, describe(tool_name, sealed) + changed, ahash)
            if first.kind == "refused":
                raise PolicyRefused(self.run_id, tool_name, first.data["reason"])
            return await self.replay(op_id, tool, clean)
        with tracing.operation(self.run_id, op_id, tool_name, self._control.token):
            await self._replayer.go_live(op_id, lambda: describe(tool_name, sealed))
            await self._check_policy(op_id, tool_name, clean, sealed, ahash)
            check = functools.partial(self._replayer.go_live, op_id)
            async with self._gate.operation(tool, op_id, check, self.alone):
                # Reserved once admitted: a wait for a slot or a rate that ends the run (a
                # cancellation, the deadline, a park) leaves no reservation behind.
                reserved = await self._reserve(op_id, tool)
                return await self.dispatch_new(op_id, tool, clean, ahash, reserved)

    async def dispatch_new(
        self, op_id: str, tool: Tool, args: dict[str, Any], ahash: str, reserved: dict[str, float]
    ) -> Any:
        action = self._action(op_id, tool.name)
        started = time.perf_counter()
        await self._control.lease_proven(f"{tool.name} ({op_id})")
        failpoints.hit("before_intention", tool.name)
        intention = {
            "tool": tool.name,
            "args": self._secrets.seal(tool.name, args),
            "args_hash": ahash,
            "key": action.idempotency_key,
            "token": self._control.token,
        }
        if reserved:
            intention["reserved"] = reserved
        await self._replayer.append("intention", op_id, intention)
        failpoints.hit("after_intention", tool.name)
        return await self.dispatch(tool, args, action, reserved=reserved, started=started)

    async def _check_policy(
        self, op_id: str, tool: str, args: dict[str, Any], sealed: dict[str, Any], ahash: str
    ) -> None:
        hook = self._app.policy_hook
        if hook is None:
            return
        verdict = hook(tool, args, self.handle)
        if isinstance(verdict, Awaitable):
            verdict = await verdict
        if verdict is None or verdict is True:
            return
        # The hook saw the call's own values: its words are stored and raised only redacted.
        reason = "refused by policy"
        if isinstance(verdict, str):
            reason = self._secrets.redact(tool, args, verdict)
        await self._replayer.append(
            "refused", op_id, {"tool": tool, "args": sealed, "args_hash": ahash, "reason": reason}
        )
        raise PolicyRefused(self.run_id, tool, reason)

    async def budget(self) -> dict[str, dict[str, float]]:
        """The run's budget as it stands: limit, spent and reserved for each name."""
        if self.budget_id is None:
            return {}
        rows = await self._control.db(self._store.budget(self.budget_id))
        return {
            r["name"]: {
                "limit": float(r["limit_value"]),
                "spent": float(r["spent"]),
                "reserved": float(r["reserved"]),
            }
            for r in rows
        }

    async def _reserve(self, op_id: str, tool: Tool) -> dict[str, float]:
        if self.budget_id is None or not tool.cost:
            return {}
        over = await self._control.db(self._store.reserve(self.budget_id, self.run_id, op_id, tool.cost))
        if over:
            raise BudgetExhausted(self.run_id, tool.name, over)
        return dict(tool.cost)

    def _action(self, op_id: str, tool: str) -> Action:
        return Action(self.run_id, op_id, tool, f"{self.run_id}:{op_id}", self._control.token)

    async def dispatch(
        self,
        tool: Tool,
        args: dict[str, Any],
        action: Action,
        how: str = "",
        reserved: dict[str, float] | None = None,
        started: float | None = None,
    ) -> Any:
        started = time.perf_counter() if started is None else started  # live: before the intention
        # Checked again here, after the intention's commit (which may have waited out an outage),
        # and on every re-dispatch of a gap: never dispatch on a lease not proven.
        await self._control.lease_proven(f"{tool.name} ({action.operation_id})")
        token = set_action(action)
        self._control.dispatching += 1
        unknown = ""  # why the operation's outcome cannot be journaled as a plain result
        try:
            # A span holds the arguments as journaled (secrets sealed), never the call's own values.
            # Its result, as journaled: with every secret value the run knows scrubbed out.
            sealed = self._secrets.seal(tool.name, args)  # logged as the span holds them
            if logs.payloads():
                self._log.info("operation.dispatched", operation_id=action.operation_id, args=sealed)
            with tracing.tool_call(tool, action, sealed) as span:
                result = await self._invoke(tool, args, action)
                try:
                    ok = self._secrets.scrub(json.loads(canonical(result, self.max_payload)))
                    payload: dict[str, Any] = {"ok": ok}
                    span.result(ok)
                    if logs.payloads():
                        self._log.info("operation.returned", operation_id=action.operation_id, result=ok)
                except Unstorable as exc:
                    payload = {"error": _error_payload(exc, self._secrets.scrub(str(exc)))}
                    unknown = f"it returned, but its result cannot be stored ({exc})"
        except Exception as exc:
            message = self._secrets.redact(tool.name, args, str(exc))  # stored and logged only so
            payload = {"error": _error_payload(exc, message)}
            if isinstance(exc, ToolTimeout):
                unknown = f"timed out after {tool.timeout:g}s; its effect may still land"
            self._log.info("tool.raised", tool=tool.name, operation_id=action.operation_id, error=message)
        finally:
            self._control.dispatching -= 1
            reset_action(token)
        if action.captured:  # what the tool sent, journaled before its outcome
            await journal_capture(self._replayer, self._secrets, tool, args, action, self.max_payload)
        if unknown and tool.effect != "read" and not tool.idempotent:
            # Given up on, or done with a result that cannot be kept: not a plain failure, which
            # a retry or a compensation would take at its word. Only a read or a tool that
            # honours its idempotency key may report it as a failure.
            metrics.operation(tool.name, "in_doubt", started)
            return await self.declare_in_doubt(tool, action, unknown, "")
        failpoints.hit("after_effect", tool.name)
        if how:
            payload["how"] = how
        appended = self._replayer.append("result", action.operation_id, payload)
        if self.budget_id is not None and (reserved or action.charges):
            # What the tool charged replaces the estimate, name by name; the rest of it stands.
            actual = {**(reserved or {}), **action.charges}
            op = action.operation_id
            settle = self._store.settle(self.budget_id, self.run_id, op, actual, expected=bool(reserved))
            settled = self._control.db(settle)
            await asyncio.gather(appended, settled)  # one shared commit, as a rule
        else:
            await appended
        failpoints.hit("after_result", tool.name)
        if tool.rates:
            await self._gate.settle(tool, action.operation_id, action.charges)
        metrics.operation(tool.name, "error" if "error" in payload else "ok", started)
        return self._outcome(tool.name, payload)

    async def _invoke(self, tool: Tool, args: dict[str, Any], action: Action) -> Any:
        """The tool, tried again (same key) after each ``RateLimited`` it raises: not an attempt,
        a wait; every worker holds the tool back meanwhile."""
        while True:
            try:
                return await invoke(tool, args)
            except RateLimited as exc:
                op = action.operation_id
                self._log.info(
                    "tool.rate_limited", tool=tool.name, operation_id=op, retry_after=exc.retry_after
                )
                await self._gate.back_off(tool, op, exc.retry_after)
                await self._control.lease_proven(f"{tool.name} ({op})")

    def _outcome(self, tool: str, payload: dict[str, Any]) -> Any:
        if "error" in payload:
            err = payload["error"]
            raise ToolError(tool, err["type"], err["message"])
        return payload["ok"]

    async def replay(self, op_id: str, tool: Tool, args: dict[str, Any]) -> Any:
        state, last = operation_state(self._replayer.history(op_id))
        if state == "done" and last is not None:
            if last.kind == "result":
                return self._outcome(tool.name, last.data)
            return last.data.get("result")  # resolved: it was executed
        if state == "in_doubt":
            self.in_doubt.add(tool.name)
            if self._control.cancel.is_set():
                await self._replayer.go_live(op_id)
            raise InDoubt(self.run_id, op_id, tool.name)
        if self._control.offline:  # an offline replay resolves no gap: nothing is dispatched
            sealed = describe(tool.name, self._secrets.seal(tool.name, args))
            raise JournalEnd(op_id, f"{sealed}, journaled with no result (a gap to resolve)")
        with tracing.operation(self.run_id, op_id, tool.name, self._control.token, resumed=True):
            # A re-dispatch after a crash is a dispatch too: its slot and rate first.
            async with self._gate.operation(tool, op_id, _no_check):
                return await self._resume(op_id, state, tool, args)

    async def _resume(self, op_id: str, state: str, tool: Tool, args: dict[str, Any]) -> Any:
        """An operation the journal leaves open: resolved as not executed by a person, or a gap."""
        intention = self._replayer.entry(op_id, "intention")
        reserved = intention.data.get("reserved") if intention is not None else None
        action = self._action(op_id, tool.name)
        if state == "cleared":
            # Resolved as not executed: run it once. The re-dispatch is journaled first, so that a
            # crash during it is a gap again, resolved by the table, never a second free run.
            await self._replayer.append("redispatch", op_id, {"how": "resolved not executed"})
            metrics.resolution("resolved_not_executed")
            how = "resolved not executed: run once"
            return await self.dispatch(tool, args, action, how=how, reserved=reserved)
        return await self._gaps.resolve(tool, args, action, reserved)

    async def declare_in_doubt(self, tool: Tool, action: Action, why: str, tb: str) -> Any:
        why, tb = self._secrets.scrub(why), self._secrets.scrub(tb)
        self._log.warning("operation.in_doubt", tool=tool.name, operation_id=action.operation_id, why=why)
        await self._replayer.append("in_doubt", action.operation_id, {"why": why, "traceback": tb})
        metrics.in_doubt(tool.name)
        self.in_doubt.add(tool.name)
        raise InDoubt(self.run_id, action.operation_id, tool.name)


async def _no_check() -> None:
    """A resumed operation's intention is journaled: nothing may stop it before its dispatch."""
