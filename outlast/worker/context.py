"""The ``run`` a workflow receives: every crossing goes through here.

On resume the workflow runs again from the start; each crossing whose entries are journaled is
served from the journal (loaded once, in one query) with no effect and no round trip. Past the
journal the run goes on live: intention committed, dispatch, result committed.
"""

from __future__ import annotations

import json
import random as _random
import time
import traceback
import uuid as _uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import structlog

from outlast import failpoints
from outlast.action import NOT_EXECUTED, Action, reset_action, set_action
from outlast.app import App, Tool
from outlast.errors import Fenced, InDoubt, ResumeImpossible, ToolError
from outlast.journal import Entry, args_hash, canonical, make_entry
from outlast.model import Run
from outlast.store import Store

log = structlog.get_logger("outlast.run")


class Journaled:
    """The journal of one run, indexed by operation, with the chain head to append after."""

    def __init__(self, entries: list[Entry]) -> None:
        self.entries = entries
        self.head = entries[-1].hash if entries else ""
        self.length = len(entries)
        self.ops: dict[str, dict[str, Entry]] = {}
        for e in entries:
            if e.op_id is not None:
                self.ops.setdefault(e.op_id, {})[e.kind] = e

    def pending(self) -> list[tuple[str, dict[str, Any]]]:
        """Intentions with no result and no resolution: the gaps a crash left."""
        out = []
        for op, kinds in self.ops.items():
            if "intention" in kinds and not kinds.keys() & {"result", "in_doubt", "resolution"}:
                out.append((op, kinds["intention"].data))
        return out


def _describe(tool: str, args: dict[str, Any]) -> str:
    return f"{tool}({canonical(args)})"


def _error_payload(exc: BaseException) -> dict[str, Any]:
    return {"type": type(exc).__name__, "message": str(exc)}


class RunContext:
    """The workflow's handle on its run."""

    def __init__(self, run: Run, app: App, store: Store, journal: Journaled) -> None:
        self.run_id = run.id
        self.input = run.input
        self.token = run.fencing_token
        self._app = app
        self._store = store
        self._journal = journal
        self._next = 0
        self._served: set[str] = set()
        self._in_doubt: set[str] = set()
        self._log = log.bind(run_id=run.id, fencing_token=run.fencing_token)
        self.before_crossing: Callable[[], None] = lambda: None
        self.dispatching = 0  # tools in flight: a hand-over lets them finish

    # -- the crossings ------------------------------------------------------------------

    def call(self, tool: str, /, **args: Any) -> Awaitable[Any]:
        """Call a tool durably. The operation's position and idempotency key are fixed here, when
        the call is made, so parallel calls keep their identity across resumes."""
        op_id = self._position()
        return self._call(op_id, tool, args)

    def now(self) -> Awaitable[datetime]:
        """The current time, journaled: a replay sees the same value."""
        op_id = self._position()

        async def value() -> datetime:
            ts = await self._value(op_id, "now", time.time)
            return datetime.fromtimestamp(ts, UTC)

        return value()

    def uuid(self) -> Awaitable[str]:
        """A random UUID, journaled."""
        return self._value(self._position(), "uuid", lambda: str(_uuid.uuid4()))

    def random(self) -> Awaitable[float]:
        """A random float in [0, 1), journaled."""
        return self._value(self._position(), "random", _random.random)

    def in_doubt(self, tool: str) -> bool:
        """True once an operation of ``tool`` was declared in doubt in this run."""
        return tool in self._in_doubt

    # -- internals ----------------------------------------------------------------------

    def _position(self) -> str:
        self._next += 1
        return f"op-{self._next}"

    def _entry(self, op_id: str, kind: str) -> Entry | None:
        return self._journal.ops.get(op_id, {}).get(kind)

    async def _append(self, kind: str, op_id: str, data: dict[str, Any]) -> Entry:
        j = self._journal
        entry = make_entry(j.head, j.length + 1, kind, op_id, data)
        j.head, j.length = entry.hash, entry.seq
        j.ops.setdefault(op_id, {})[kind] = entry
        if not await self._store.append(self.run_id, self.token, entry):
            raise Fenced(self.run_id, self.token)
        return entry

    def _mismatch(self, op_id: str, program: str) -> ResumeImpossible:
        first = min(self._journal.ops[op_id].values(), key=lambda e: e.seq)
        d = first.data
        had = _describe(d["tool"], d["args"]) if first.kind == "intention" else f"{d.get('name')}()"
        return ResumeImpossible(self.run_id, first.seq, had, program)

    async def _value(self, op_id: str, name: str, make: Callable[[], Any]) -> Any:
        self.before_crossing()
        self._served.add(op_id)
        if op_id in self._journal.ops:
            e = self._entry(op_id, "value")
            if e is None or e.data.get("name") != name:
                raise self._mismatch(op_id, f"{name}()")
            return e.data["value"]
        value = make()
        await self._append("value", op_id, {"name": name, "value": value})
        return value

    async def _call(self, op_id: str, tool_name: str, args: dict[str, Any]) -> Any:
        tool = self._app.get_tool(tool_name)
        clean = tool.validate(args)  # an invalid call never reaches the journal
        self.before_crossing()
        self._served.add(op_id)
        ahash = args_hash(clean)
        if op_id in self._journal.ops:
            intent = self._entry(op_id, "intention")
            if intent is None or (intent.data["tool"], intent.data["args_hash"]) != (tool_name, ahash):
                raise self._mismatch(op_id, _describe(tool_name, clean))
            return await self._replay(op_id, tool, clean)
        action = self._action(op_id, tool_name)
        failpoints.hit("before_intention", tool_name)
        await self._append(
            "intention",
            op_id,
            {
                "tool": tool_name,
                "args": clean,
                "args_hash": ahash,
                "key": action.idempotency_key,
                "token": self.token,
            },
        )
        failpoints.hit("after_intention", tool_name)
        return await self._dispatch(tool, clean, action)

    def _action(self, op_id: str, tool: str) -> Action:
        return Action(self.run_id, op_id, tool, f"{self.run_id}:{op_id}", self.token)

    async def _dispatch(self, tool: Tool, args: dict[str, Any], action: Action, how: str = "") -> Any:
        token = set_action(action)
        self.dispatching += 1
        try:
            payload: dict[str, Any] = {"ok": json.loads(canonical(await tool.invoke(args)))}
        except Exception as exc:
            payload = {"error": _error_payload(exc)}
            self._log.info("tool raised", tool=tool.name, operation_id=action.operation_id, error=str(exc))
        finally:
            self.dispatching -= 1
            reset_action(token)
        failpoints.hit("after_effect", tool.name)
        if how:
            payload["how"] = how
        await self._append("result", action.operation_id, payload)
        failpoints.hit("after_result", tool.name)
        return self._outcome(tool.name, payload)

    def _outcome(self, tool: str, payload: dict[str, Any]) -> Any:
        if "error" in payload:
            err = payload["error"]
            raise ToolError(tool, err["type"], err["message"])
        return payload["ok"]

    async def _replay(self, op_id: str, tool: Tool, args: dict[str, Any]) -> Any:
        result = self._entry(op_id, "result")
        if result is not None:
            return self._outcome(tool.name, result.data)
        action = self._action(op_id, tool.name)
        resolution = self._entry(op_id, "resolution")
        if resolution is not None:
            r = resolution.data
            if r["executed"]:
                return r.get("result")
            return await self._dispatch(tool, args, action, how="resolved not executed: run once")
        if self._entry(op_id, "in_doubt") is not None:
            self._in_doubt.add(tool.name)
            raise InDoubt(self.run_id, op_id, tool.name)
        return await self._resolve_gap(tool, args, action)

    async def _resolve_gap(self, tool: Tool, args: dict[str, Any], action: Action) -> Any:
        """An intention with no result: resolve it as DESIGN.md's table says."""
        op, name = action.operation_id, tool.name
        say = self._log.bind(tool=name, operation_id=op, idempotency_key=action.idempotency_key).info
        if tool.effect == "read":
            say(f"↻ {name} ({op}): a read, redone")
            return await self._dispatch(tool, args, action, how="read: redone")
        if tool.idempotent:
            say(f"↻ {name} ({op}): dispatched again with the same idempotency key")
            return await self._dispatch(tool, args, action, how="idempotent: same key")
        reconcile = self._app.reconcilers.get(name)
        if reconcile is not None:
            token = set_action(action)
            try:
                answer = reconcile(args, action)
                if isinstance(answer, Awaitable):
                    answer = await answer
            except Exception as exc:
                why = f"reconciler raised {type(exc).__name__}: {exc}"
                return await self._declare_in_doubt(tool, action, why, traceback.format_exc())
            finally:
                reset_action(token)
            if answer is NOT_EXECUTED:
                say(f"↻ {name} ({op}): reconciler says not executed; executing it now")
                await self._append("resolution", op, {"how": "reconciler", "executed": False})
                return await self._dispatch(tool, args, action, how="reconciler: not executed")
            say(f"✓ {name} ({op}): reconciler says executed; its result is journaled")
            payload = {"ok": json.loads(canonical(answer)), "how": "reconciler: executed"}
            await self._append("result", op, payload)
            return payload["ok"]
        return await self._declare_in_doubt(tool, action, "no idempotency key promise and no reconciler", "")

    async def _declare_in_doubt(self, tool: Tool, action: Action, why: str, tb: str) -> Any:
        self._log.warning(
            f"? {tool.name} ({action.operation_id}): in doubt, not executed again ({why})",
            tool=tool.name,
            operation_id=action.operation_id,
        )
        await self._append("in_doubt", action.operation_id, {"why": why, "traceback": tb})
        self._in_doubt.add(tool.name)
        raise InDoubt(self.run_id, action.operation_id, tool.name)

    def check_consumed(self) -> None:
        """A run that ends while journaled crossings were never asked for has diverged."""
        for op_id in self._journal.ops:
            if op_id not in self._served:
                raise self._mismatch(op_id, "nothing more (the workflow returned)")
