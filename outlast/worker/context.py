"""The ``run`` a workflow receives: every crossing goes through here.

On resume the workflow runs again from the start; each crossing whose entries are journaled is
served from the journal (loaded once, in one query) with no effect and no round trip. Past the
journal the run goes on live: intention committed, dispatch, result committed. A crossing that
would block (an approval, a timer, an in-doubt operation) commits a durable wait and unwinds the
workflow; the run is taken up again, by any worker, when it is woken.
"""

from __future__ import annotations

import asyncio
import json
import random as _random
import time
import traceback
import uuid as _uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import structlog

from outlast import failpoints
from outlast.action import NOT_EXECUTED, Action, reset_action, set_action
from outlast.app import App, Tool
from outlast.errors import (
    ApprovalExpired,
    ApprovalRejected,
    BudgetExhausted,
    Cancelled,
    DeadlineExceeded,
    Fenced,
    InDoubt,
    InvalidInput,
    PolicyRefused,
    ResumeImpossible,
    ServiceUnavailable,
    ToolError,
    ToolTimeout,
)
from outlast.journal import Entry, Unstorable, args_hash, canonical, make_entry, operation_state, storable
from outlast.model import Decision, Run
from outlast.store import Store

log = structlog.get_logger("outlast.run")
T = TypeVar("T")


class Suspended(BaseException):
    """A durable wait is committed: unwind the workflow; the worker is free."""

    def __init__(self, wake_at: datetime | None = None) -> None:
        super().__init__("suspended")
        self.wake_at = wake_at


class Interrupted(BaseException):
    """The run cannot go on here now (Postgres did not take its writes within the bound, or its
    lease could not be proven before a dispatch): it is left, with no verdict, to be taken up
    again. A BaseException, so that a workflow's ``except Exception`` cannot swallow it."""


class LeaseClock:
    """Until when this worker has proven its lease, on the local monotonic clock: a claim or a
    renewal sent at ``t`` proves it until ``t + ttl`` (sent, not answered: on the safe side)."""

    def __init__(self, ttl: float, sent_at: float) -> None:
        self.ttl = ttl
        self.until = sent_at + ttl

    def proven(self, sent_at: float) -> None:
        self.until = max(self.until, sent_at + self.ttl)

    def remaining(self) -> float:
        return self.until - time.monotonic()


class Journaled:
    """The journal of one run, indexed by operation, with the chain head to append after."""

    def __init__(self, entries: list[Entry]) -> None:
        self.entries = entries
        self.head = entries[-1].hash if entries else ""
        self.length = len(entries)
        self.ops: dict[str, dict[str, Entry]] = {}  # the latest entry of each kind
        self.history: dict[str, list[Entry]] = {}  # every entry, in order
        for e in entries:
            self.add(e)

    def add(self, e: Entry) -> None:
        if e.op_id is not None:
            self.ops.setdefault(e.op_id, {})[e.kind] = e
            self.history.setdefault(e.op_id, []).append(e)

    def pending(self) -> list[tuple[str, dict[str, Any]]]:
        """Operations with an intention and no outcome: the gaps a crash left."""
        return [
            (op, kinds["intention"].data)
            for op, kinds in self.ops.items()
            if "intention" in kinds and operation_state(self.history[op])[0] == "pending"
        ]


def _describe(tool: str, args: dict[str, Any]) -> str:
    return f"{tool}({canonical(args)})"


def _describe_entry(e: Entry) -> str:
    d = e.data
    if e.kind in ("intention", "refused"):
        return _describe(d["tool"], d["args"])
    if e.kind == "approval":
        return f"approval of {_describe(d['action'], d['args'])}"
    if e.kind == "timer":
        return "sleep()"
    return f"{d.get('name', e.kind)}()"


_BOUND = ("action", "args_hash", "approvers", "policy_version")  # what an approval is bound to


def _error_payload(exc: BaseException) -> dict[str, Any]:
    return {"type": type(exc).__name__, "message": storable(str(exc))}


class RunContext:
    """The workflow's handle on its run."""

    def __init__(
        self,
        run: Run,
        app: App,
        store: Store,
        journal: Journaled,
        db_now: datetime | None = None,
        max_payload: int | None = None,
    ) -> None:
        self.max_payload = max_payload  # the largest result or approval arguments stored
        self.run_id = run.id
        self.input = run.input
        self.token = run.fencing_token
        self.deadline = run.deadline
        self.budget_id = run.budget_id
        self.cancel_requested = run.cancel_requested
        self._app = app
        self._store = store
        self._journal = journal
        self._clock = (db_now, time.monotonic())
        self._next = 0
        self._served: set[str] = set()
        self._in_doubt: set[str] = set()
        self._log = log.bind(run_id=run.id, fencing_token=run.fencing_token)
        self.before_crossing: Callable[[], None] = lambda: None
        self.lease: LeaseClock | None = None  # set by the worker; tests may run without
        # Set once the run is left (fenced, interrupted, handed over): the calls still under way
        # in parallel must neither dispatch nor journal an intention any more.
        self.abandoned = False
        self.dispatching = 0  # tools in flight: a hand-over lets them finish
        self._calls = 0  # tool calls under way, parallel ones included
        self._quiet = asyncio.Event()
        self._quiet.set()

    # -- the crossings ------------------------------------------------------------------

    def call(self, tool: str, /, **args: Any) -> Awaitable[Any]:
        """Call a tool durably. The operation's position and idempotency key are fixed here, when
        the call is made, so parallel calls keep their identity across resumes."""
        op_id = self._position()

        async def counted() -> Any:
            self._calls += 1
            self._quiet.clear()
            try:
                return await self._call(op_id, tool, args)
            finally:
                self._calls -= 1
                if self._calls == 0:
                    self._quiet.set()

        return counted()

    async def settled(self) -> None:
        """Wait for the calls still under way: a parallel call can outlive the workflow's own
        await (the siblings of a ``gather`` that raised go on), and the run must not end before
        their results are journaled."""
        await self._quiet.wait()

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

    def sleep(self, seconds: float) -> Awaitable[None]:
        """Sleep durably: the run waits (reason ``timer``) with no worker held, and is woken at
        the due time (database clock) by whichever worker is up."""
        return self._sleep(self._position(), seconds=seconds)

    def sleep_until(self, when: datetime) -> Awaitable[None]:
        """Sleep durably until ``when`` (an aware datetime)."""
        return self._sleep(self._position(), until=when)

    def approval(
        self,
        action: str,
        args: dict[str, Any],
        *,
        approvers: list[str],
        expires_in: float | None = None,
        policy_version: str = "",
    ) -> Awaitable[Decision]:
        """Ask people to approve ``action`` with exactly these ``args``. The run waits
        (``awaiting_approval``) with no worker held. Returns the decision (approved, or revised
        with new args that need an approval of their own); a rejection raises ``ApprovalRejected``
        and an expiry ``ApprovalExpired``."""
        if not approvers:
            raise InvalidInput(f"run '{self.run_id}': an approval needs at least one approver")
        op_id = self._position()
        return self._approval(op_id, action, args, approvers, expires_in, policy_version)

    def in_doubt(self, tool: str) -> bool:
        """True once an operation of ``tool`` was declared in doubt in this run."""
        return tool in self._in_doubt

    # -- entering a crossing ------------------------------------------------------------

    def _position(self) -> str:
        self._next += 1
        return f"op-{self._next}"

    def _enter(self, op_id: str) -> None:
        self.before_crossing()
        self._served.add(op_id)
        if self._entry(op_id, "cancel") is not None:
            raise Cancelled()

    def _db_now(self) -> datetime:
        at, mono = self._clock
        base = at or datetime.now(UTC)
        return base + timedelta(seconds=time.monotonic() - mono)

    async def _stop_if_asked(self, op_id: str) -> None:
        """Where the run would go live or block: a cancellation or a passed deadline stops it."""
        if self.cancel_requested:
            await self._append("cancel", op_id, {})
            raise Cancelled()
        if self.deadline is not None and self._db_now() >= self.deadline:
            raise DeadlineExceeded(
                f"run '{self.run_id}': its deadline {self.deadline:%Y-%m-%d %H:%M:%S %Z} passed "
                f"(at {op_id}); to carry on, continue it in a new run"
            )

    async def _db(self, pending: Awaitable[T]) -> T:
        try:
            return await pending
        except ServiceUnavailable as exc:
            self.abandoned = True
            raise Interrupted(str(exc)) from exc

    async def _lease_proven(self, tool: str, op_id: str) -> None:
        """Dispatch only with a lease proven for at least a third of its TTL more (a heartbeat
        was missed otherwise: this worker may be paused, or its link slow); wait up to one TTL
        for a renewal, else leave the run. This narrows, and cannot close, the window in which
        a paused worker's effect lands after another owner took over (README: guarantees)."""
        if self.abandoned:
            raise Interrupted(
                f"run '{self.run_id}': abandoned by this worker; {tool} ({op_id}) not dispatched"
            )
        lease = self.lease
        if lease is None:
            return
        give_up = time.monotonic() + lease.ttl
        while lease.remaining() < lease.ttl / 3:
            if time.monotonic() > give_up:
                self.abandoned = True
                raise Interrupted(
                    f"run '{self.run_id}': lease not proven before dispatching {tool} ({op_id}); "
                    "left for another worker"
                )
            await asyncio.sleep(0.05)

    def _entry(self, op_id: str, kind: str) -> Entry | None:
        return self._journal.ops.get(op_id, {}).get(kind)

    async def _append(self, kind: str, op_id: str, data: dict[str, Any]) -> Entry:
        j = self._journal
        entry = make_entry(j.head, j.length + 1, kind, op_id, data)
        j.head, j.length = entry.hash, entry.seq
        j.add(entry)
        cancel = await self._db(self._store.append(self.run_id, self.token, entry))
        if cancel is None:
            self.abandoned = True
            raise Fenced(self.run_id, self.token)
        self.cancel_requested = self.cancel_requested or cancel
        return entry

    def _mismatch(self, op_id: str, program: str) -> ResumeImpossible:
        first = min(self._journal.ops[op_id].values(), key=lambda e: e.seq)
        return ResumeImpossible(self.run_id, first.seq, _describe_entry(first), program)

    # -- values and timers --------------------------------------------------------------

    async def _value(self, op_id: str, name: str, make: Callable[[], Any]) -> Any:
        self._enter(op_id)
        if op_id in self._journal.ops:
            e = self._entry(op_id, "value")
            if e is None or e.data.get("name") != name:
                raise self._mismatch(op_id, f"{name}()")
            return e.data["value"]
        await self._stop_if_asked(op_id)
        value = make()
        await self._append("value", op_id, {"name": name, "value": value})
        return value

    async def _sleep(self, op_id: str, seconds: float = 0.0, until: datetime | None = None) -> None:
        self._enter(op_id)
        now = await self._db(self._store.db_now())
        if op_id in self._journal.ops:
            e = self._entry(op_id, "timer")
            if e is None:
                raise self._mismatch(op_id, "sleep()")
            due = datetime.fromisoformat(e.data["until"])
        else:
            await self._stop_if_asked(op_id)
            due = until if until is not None else now + timedelta(seconds=seconds)
            await self._append("timer", op_id, {"until": due.isoformat()})
        if due <= now:
            return
        await self.settled()  # calls made in parallel journal their results before the run lets go
        await self._stop_if_asked(op_id)
        waiting = self._store.wait(self.run_id, self.token, "timer", f"sleeping until {due}", due)
        if not await self._db(waiting):
            raise Fenced(self.run_id, self.token)
        raise Suspended(due)

    # -- approvals ----------------------------------------------------------------------

    async def _approval(
        self,
        op_id: str,
        action: str,
        args: dict[str, Any],
        approvers: list[str],
        expires_in: float | None,
        policy_version: str,
    ) -> Decision:
        clean: dict[str, Any] = json.loads(canonical(args, self.max_payload))
        ahash = args_hash(clean)
        self._enter(op_id)
        if op_id in self._journal.ops:
            asked = self._entry(op_id, "approval")
            bound = (action, ahash, approvers, policy_version)
            if asked is None or tuple(asked.data[k] for k in _BOUND) != bound:
                raise self._mismatch(op_id, f"approval of {_describe(action, clean)}")
        else:
            await self._stop_if_asked(op_id)
            await self._append(
                "approval",
                op_id,
                {
                    "action": action,
                    "args": clean,
                    "args_hash": ahash,
                    "approvers": approvers,
                    "expires_in": expires_in,
                    "policy_version": policy_version,
                },
            )
        decided = self._entry(op_id, "decision")
        if decided is None:
            row = await self._db(self._store.approval(self.run_id, op_id))
            if row is not None and row["status"] != "pending":
                decided = await self._append(
                    "decision",
                    op_id,
                    {
                        "status": row["status"],
                        "by": row["decided_by"],
                        "comment": row["comment"],
                        "args": row["new_args"] if row["status"] == "revised" else clean,
                    },
                )
            elif row is not None and row["expired"]:
                decided = await self._append("decision", op_id, {"status": "expired"})
            else:
                await self.settled()  # as in _sleep: parallel calls journal their results first
                await self._stop_if_asked(op_id)
                ok = await self._db(
                    self._store.await_approval(
                        self.run_id,
                        self.token,
                        op_id,
                        action=action,
                        args=clean,
                        args_hash=ahash,
                        policy_version=policy_version,
                        approvers=approvers,
                        expires_in=expires_in,
                    )
                )
                if not ok:
                    raise Fenced(self.run_id, self.token)
                self._log.info(f"run {self.run_id} awaits approval {op_id} of {action}")
                raise Suspended()
        return self._decision(op_id, action, decided.data)

    def _decision(self, op_id: str, action: str, d: dict[str, Any]) -> Decision:
        status = d["status"]
        if status == "expired":
            raise ApprovalExpired(f"run '{self.run_id}': approval {op_id} of {action} expired undecided")
        if status == "rejected":
            raise ApprovalRejected(
                f"run '{self.run_id}': {d['by']} rejected {action} ({op_id}): {d['comment']}"
            )
        return Decision(op_id, status, d["by"], d["comment"], d["args"])

    # -- tool calls ---------------------------------------------------------------------

    async def _call(self, op_id: str, tool_name: str, args: dict[str, Any]) -> Any:
        tool = self._app.get_tool(tool_name)
        clean = tool.validate(args)  # an invalid call never reaches the journal
        self._enter(op_id)
        ahash = args_hash(clean)
        if op_id in self._journal.ops:
            kinds = self._journal.ops[op_id]
            first = kinds.get("intention") or kinds.get("refused")
            if first is None or (first.data["tool"], first.data["args_hash"]) != (tool_name, ahash):
                raise self._mismatch(op_id, _describe(tool_name, clean))
            if first.kind == "refused":
                raise PolicyRefused(self.run_id, tool_name, first.data["reason"])
            return await self._replay(op_id, tool, clean)
        await self._stop_if_asked(op_id)
        await self._check_policy(op_id, tool_name, clean, ahash)
        reserved = await self._reserve(op_id, tool)
        return await self._dispatch_new(op_id, tool, clean, ahash, reserved)

    async def _dispatch_new(
        self, op_id: str, tool: Tool, args: dict[str, Any], ahash: str, reserved: dict[str, float]
    ) -> Any:
        action = self._action(op_id, tool.name)
        await self._lease_proven(tool.name, op_id)
        failpoints.hit("before_intention", tool.name)
        intention = {
            "tool": tool.name,
            "args": args,
            "args_hash": ahash,
            "key": action.idempotency_key,
            "token": self.token,
        }
        if reserved:
            intention["reserved"] = reserved
        await self._append("intention", op_id, intention)
        failpoints.hit("after_intention", tool.name)
        return await self._dispatch(tool, args, action, reserved=reserved)

    async def _check_policy(self, op_id: str, tool: str, args: dict[str, Any], ahash: str) -> None:
        hook = self._app.policy_hook
        if hook is None:
            return
        verdict = hook(tool, args, self)
        if isinstance(verdict, Awaitable):
            verdict = await verdict
        if verdict is None or verdict is True:
            return
        reason = verdict if isinstance(verdict, str) else "refused by policy"
        await self._append(
            "refused", op_id, {"tool": tool, "args": args, "args_hash": ahash, "reason": reason}
        )
        raise PolicyRefused(self.run_id, tool, reason)

    async def budget(self) -> dict[str, dict[str, float]]:
        """The run's budget as it stands: limit, spent and reserved for each name."""
        if self.budget_id is None:
            return {}
        rows = await self._db(self._store.budget(self.budget_id))
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
        over = await self._db(self._store.reserve(self.budget_id, self.run_id, op_id, tool.cost))
        if over:
            raise BudgetExhausted(self.run_id, tool.name, over)
        return dict(tool.cost)

    def _action(self, op_id: str, tool: str) -> Action:
        return Action(self.run_id, op_id, tool, f"{self.run_id}:{op_id}", self.token)

    async def _dispatch(
        self,
        tool: Tool,
        args: dict[str, Any],
        action: Action,
        how: str = "",
        reserved: dict[str, float] | None = None,
    ) -> Any:
        # Checked again here, after the intention's commit (which may have waited out an outage),
        # and on every re-dispatch of a gap: never dispatch on a lease not proven.
        await self._lease_proven(tool.name, action.operation_id)
        token = set_action(action)
        self.dispatching += 1
        unknown = ""  # why the operation's outcome cannot be journaled as a plain result
        try:
            result = await tool.invoke(args)
            try:
                payload: dict[str, Any] = {"ok": json.loads(canonical(result, self.max_payload))}
            except Unstorable as exc:
                payload = {"error": _error_payload(exc)}
                unknown = f"it returned, but its result cannot be stored ({exc})"
        except Exception as exc:
            payload = {"error": _error_payload(exc)}
            if isinstance(exc, ToolTimeout):
                unknown = f"timed out after {tool.timeout:g}s; its effect may still land"
            self._log.info("tool raised", tool=tool.name, operation_id=action.operation_id, error=str(exc))
        finally:
            self.dispatching -= 1
            reset_action(token)
        if unknown and tool.effect != "read" and not tool.idempotent:
            # Given up on, or done with a result that cannot be kept: not a plain failure, which
            # a retry or a compensation would take at its word. Only a read or a tool that
            # honours its idempotency key may report it as a failure.
            return await self._declare_in_doubt(tool, action, unknown, "")
        failpoints.hit("after_effect", tool.name)
        if how:
            payload["how"] = how
        appended = self._append("result", action.operation_id, payload)
        if self.budget_id is not None and (reserved or action.charges):
            # What the tool charged replaces the estimate, name by name; the rest of it stands.
            actual = {**(reserved or {}), **action.charges}
            op = action.operation_id
            settle = self._store.settle(self.budget_id, self.run_id, op, actual, expected=bool(reserved))
            settled = self._db(settle)
            await asyncio.gather(appended, settled)  # one shared commit, as a rule
        else:
            await appended
        failpoints.hit("after_result", tool.name)
        return self._outcome(tool.name, payload)

    def _outcome(self, tool: str, payload: dict[str, Any]) -> Any:
        if "error" in payload:
            err = payload["error"]
            raise ToolError(tool, err["type"], err["message"])
        return payload["ok"]

    async def _replay(self, op_id: str, tool: Tool, args: dict[str, Any]) -> Any:
        state, last = operation_state(self._journal.history[op_id])
        if state == "done" and last is not None:
            if last.kind == "result":
                return self._outcome(tool.name, last.data)
            return last.data.get("result")  # resolved: it was executed
        intention = self._entry(op_id, "intention")
        reserved = intention.data.get("reserved") if intention is not None else None
        action = self._action(op_id, tool.name)
        if state == "cleared":
            # Resolved as not executed: run it once. The re-dispatch is journaled first, so that a
            # crash during it is a gap again, resolved by the table, never a second free run.
            await self._append("redispatch", op_id, {"how": "resolved not executed"})
            how = "resolved not executed: run once"
            return await self._dispatch(tool, args, action, how=how, reserved=reserved)
        if state == "in_doubt":
            self._in_doubt.add(tool.name)
            if self.cancel_requested:
                await self._stop_if_asked(op_id)
            raise InDoubt(self.run_id, op_id, tool.name)
        return await self._resolve_gap(tool, args, action, reserved)

    async def _resolve_gap(
        self, tool: Tool, args: dict[str, Any], action: Action, reserved: dict[str, float] | None
    ) -> Any:
        """An intention with no result: resolve it as DESIGN.md's table says."""
        op, name = action.operation_id, tool.name
        say = self._log.bind(tool=name, operation_id=op, idempotency_key=action.idempotency_key).info
        if tool.effect == "read":
            say(f"↻ {name} ({op}): a read, redone")
            return await self._dispatch(tool, args, action, how="read: redone", reserved=reserved)
        if tool.idempotent:
            say(f"↻ {name} ({op}): dispatched again with the same idempotency key")
            return await self._dispatch(tool, args, action, how="idempotent: same key", reserved=reserved)
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
                # No resolution entry: should this dispatch die too, the op is a gap again and
                # the reconciler is asked again (it would then say executed), never skipped.
                return await self._dispatch(
                    tool, args, action, how="reconciler: not executed", reserved=reserved
                )
            say(f"✓ {name} ({op}): reconciler says executed; its result is journaled")
            payload = {"ok": json.loads(canonical(answer, self.max_payload)), "how": "reconciler: executed"}
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

    # -- the end ------------------------------------------------------------------------

    async def compensate(self) -> dict[str, list[Any]]:
        """Run the compensations of the completed operations, newest first, each as a journaled
        operation of its own. Says an effect was undone only if its compensation succeeded."""
        done = []
        for op_id, kinds in self._journal.ops.items():
            result, intention = kinds.get("result"), kinds.get("intention")
            if result is None or intention is None or "error" in result.data or op_id.startswith("undo-"):
                continue
            if intention.data["tool"] in self._app.compensations:
                done.append((result.seq, op_id, intention.data, result.data["ok"]))
        compensated: list[Any] = []
        not_compensated: list[Any] = []
        for _seq, op_id, asked, value in sorted(done, reverse=True):
            tool = self._app.compensations[asked["tool"]]
            undo_op = f"undo-{op_id}"
            self._served.add(undo_op)
            args = tool.validate({"args": asked["args"], "result": value})
            try:
                if undo_op in self._journal.ops:
                    await self._replay(undo_op, tool, args)
                else:
                    await self._dispatch_new(undo_op, tool, args, args_hash(args), {})
                compensated.append({"operation": op_id, "tool": asked["tool"]})
            except (ToolError, InDoubt) as exc:
                not_compensated.append({"operation": op_id, "tool": asked["tool"], "why": str(exc)})
        return {"compensated": compensated, "not_compensated": not_compensated}

    def check_consumed(self) -> None:
        """A run that ends while journaled crossings were never asked for has diverged."""
        for op_id in self._journal.ops:
            if op_id not in self._served:
                raise self._mismatch(op_id, "nothing more (the workflow returned)")
