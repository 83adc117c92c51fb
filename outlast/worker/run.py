"""``Run`` is the one thing a workflow sees (``from outlast import Run``).

Every crossing (``call``, ``now``, ``sleep``, ``approval``, ``request``, ``receive``, ``callback``,
what the run shows: ``set_state``, ``emit``, ``stream``) is handed to the part that owns it: the
replayer, the dispatcher, the waits, the requests, the inbox (messages), ``RunShown``.
"""

from __future__ import annotations

import functools
import inspect
import random as _random
import uuid as _uuid
import weakref
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, ParamSpec, TypeVar, overload

from outlast._model import Decision
from outlast.errors import InvalidInput
from outlast.store import Store
from outlast.worker.artifacts import Data
from outlast.worker.children import Child, RunChildren
from outlast.worker.compensator import compensate
from outlast.worker.control import Suspended
from outlast.worker.conversing import Conversing
from outlast.worker.dispatcher import Dispatcher
from outlast.worker.first import First
from outlast.worker.inbox import Inbox
from outlast.worker.requests import RunRequests
from outlast.worker.scope import RunScope
from outlast.worker.shown import RunShown, Showing
from outlast.worker.underway import UnderWay, may_park as may_park_run
from outlast.worker.wait import Wait

P = ParamSpec("P")
R = TypeVar("R")


class Run(Showing, Conversing):
    """``Run`` is the workflow's handle on its run: durable crossings, each journaled once and served from
    the journal on every resume."""

    def __init__(self, scope: RunScope, store: Store) -> None:
        record = scope.record
        self.id = record.id
        self.input = record.input
        self.tenant = record.tenant  # whose run (None: not given); its child runs keep it
        self._app = scope.app
        self._budgets = store.budgets  # the run's budget standing
        self._control = scope.control
        self._budget_id = record.budget_id
        # Of what a carry forward takes on (``Conversing``): held by reference past OUTLAST_MAX_PAYLOAD.
        self._max_payload = scope.writes.referenced or scope.max_payload
        self._replayer = scope.replayer
        # No part holds the run itself, only what it needs of it (the crossings under way, a weak
        # reference for the policy hook): a finished run's objects then die by reference count,
        # not in a pass of the collector (~50 objects a run, all of them cyclic garbage before).
        self._under_way = UnderWay()
        settled = self._under_way.settled
        wf = scope.app.workflows.get(record.workflow)
        channels = None if wf is None else wf.channels
        self._waits = Inbox(
            scope,
            leases=store.leases,
            sweeps=store.sweeps,
            approvals=store.approvals,
            messages=store.messages,
            settled=settled,
            channels=channels,
        )
        self._requests = RunRequests(scope, requests=store.requests, settled=settled)
        self._children = RunChildren(scope, children=store.children, runs=store.runs, settled=settled)
        self._shown = RunShown(scope)
        self._first = First(
            self._requests,
            self._waits,
            self._children,
            firsts=store.firsts,
            request_rows=store.requests,
            runs=store.runs,
            approvals=store.approvals,
            sweeps=store.sweeps,
        )
        # a tool's slot or rate wait may park the run when no other crossing is under way
        may_park = functools.partial(may_park_run, self._under_way, self._children)
        handle = weakref.ref(self)  # the run, for the policy hook
        self._dispatcher = Dispatcher(
            scope,
            budgets=store.budgets,
            journal=store.journal,
            handle=handle,
            may_park=may_park,
            artifacts=store.artifacts,
        )

    @property
    def run_id(self) -> str:
        return self.id

    # -- the crossings ------------------------------------------------------------------

    @overload
    def call(self, tool: Callable[P, Awaitable[R]], /, *args: P.args, **kwargs: P.kwargs) -> Awaitable[R]: ...
    @overload
    def call(self, tool: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> Awaitable[R]: ...
    @overload
    def call(self, tool: str, /, *args: Any, **kwargs: Any) -> Awaitable[Any]: ...

    def call(self, tool: Callable[..., Any] | str, /, *args: Any, **kwargs: Any) -> Awaitable[Any]:
        """Call a tool durably, by its registered name or by the function itself (then mypy
        checks the arguments and knows the result's type). The operation's position and
        idempotency key are fixed here, when the call is made, so parallel calls keep their
        identity across resumes."""
        name = tool if isinstance(tool, str) else self._app.tool_name(tool)
        if args:  # positional arguments are journaled by their parameter names
            fn = self._app.get_tool(name).fn
            try:
                kwargs = dict(inspect.signature(fn).bind_partial(*args, **kwargs).arguments)
            except TypeError as exc:
                raise InvalidInput(f"invalid call to tool '{name}': {exc}") from None
        op_id = self._replayer.position()
        under_way, dispatcher = self._under_way, self._dispatcher

        async def counted() -> Any:
            under_way.calls += 1
            try:
                return await dispatcher.call(op_id, name, kwargs)
            finally:
                under_way.call_ended()

        return counted()

    def now(self) -> Awaitable[datetime]:
        """The current time, journaled: a replay sees the same value. It is the clock of claims,
        leases and due times (``outlast_now()``: the database's, plus the offset tests move),
        read at the claim and carried on by the local monotonic clock."""
        op_id = self._replayer.position()
        replayer = self._replayer

        async def value() -> datetime:
            ts = await self._replayer.value(op_id, "now", lambda: replayer.db_now().timestamp())
            return datetime.fromtimestamp(ts, UTC)

        return value()

    def uuid(self) -> Awaitable[str]:
        """A random UUID, journaled."""
        return self._replayer.value(self._replayer.position(), "uuid", lambda: str(_uuid.uuid4()))

    def random(self) -> Awaitable[float]:
        """A random float in [0, 1), journaled."""
        return self._replayer.value(self._replayer.position(), "random", _random.random)

    def save_artifact(
        self, name: str, data_or_path: Data, media_type: str | None = None, *, keep: bool = False
    ) -> Awaitable[dict[str, Any]]:
        """Save a file as an artifact of the run (``bytes``, or a path read whole), stored once in
        the payload store and indexed by (run, this crossing, name): a journaled crossing, so a
        replay saves nothing again. ``keep=True``: kept past the run's retention. Returns its
        reference: name, op_id, sha256, size, media_type, keep."""
        return self._dispatcher.saver.crossing(
            self._replayer.position(), name, data_or_path, media_type, keep
        )

    def sleep(self, seconds: float) -> Wait[None]:
        """Sleep durably: the run waits (reason ``timer``) with no worker held, and is woken at
        the due time (database clock) by whichever worker is up. A ``Wait``: awaited, or given to
        ``first``, as every durable wait."""
        op_id = self._replayer.position()
        alone = lambda: self._pausing(self._waits.sleep(op_id, seconds=seconds))  # noqa: E731
        return Wait("timer", op_id, {"seconds": seconds}, alone)

    def sleep_until(self, when: datetime) -> Wait[None]:
        """Sleep durably until ``when`` (an aware datetime)."""
        op_id = self._replayer.position()
        return Wait(
            "timer", op_id, {"until": when}, lambda: self._pausing(self._waits.sleep(op_id, until=when))
        )

    def approval(
        self,
        action: str,
        args: dict[str, Any],
        *,
        approvers: list[str],
        expires_in: float | None = None,
        policy_version: str = "",
        authenticated: bool = False,
    ) -> Wait[Decision]:
        """Ask people to approve ``action`` with exactly these ``args``. The run waits
        (``awaiting_approval``) with no worker held. Returns the decision (approved, or revised
        with new args that need an approval of their own); a rejection raises ``ApprovalRejected``
        and an expiry ``ApprovalExpired``. ``authenticated=True``: only a person signed in to the
        dashboard or the API may decide (the CLI, which only declares a name, is refused)."""
        if not approvers:
            raise InvalidInput(f"run '{self.id}': an approval needs at least one approver")
        op_id = self._replayer.position()
        spec: dict[str, Any] = {
            "action": action,
            "args": args,
            "approvers": approvers,
            "expires_in": expires_in,
        }
        spec |= {"policy_version": policy_version, "authenticated": authenticated}
        return Wait("approval", op_id, spec, lambda: self._pausing(self._waits.approval(op_id, **spec)))

    def patched(self, name: str) -> bool:
        """A patch marker, for changing a workflow under runs already started: ``if
        run.patched("fix-refund-rounding"): <new code> else: <old code>``. A run that went past
        this point before the patch existed replays the old branch (False); every other run takes
        the new one (True), journaled like a crossing so that its replays take it again."""
        return self._replayer.patched(name)

    def start(
        self, workflow: str, input: dict[str, Any] | None = None, *, queue: str | None = None
    ) -> Awaitable[Child]:
        """Start a child run of ``workflow`` with ``input`` (on ``queue``, else the queue the
        workflow routes to, else this run's): a
        journaled crossing. The child's id is derived from this run and this crossing, so a
        resumed run finds the same child; it shares this run's budget, deadline and tenant, and
        is cancelled with it. ``await child.result()`` waits for it with no worker held."""
        data = {} if input is None else input
        return self._children.start(self._replayer.position(), workflow, data, queue)

    def in_doubt(self, tool: str) -> bool:
        """True once an operation of ``tool`` was declared in doubt in this run."""
        return tool in self._dispatcher.in_doubt

    async def budget(self) -> dict[str, dict[str, float]]:
        """The run's budget as it stands: limit, spent and reserved for each name."""
        if self._budget_id is None:
            return {}
        return await self._control.db(self._budgets.budget_standing(self._budget_id))

    async def _pausing(self, wait: Awaitable[R]) -> R:
        """A timer or an approval, counted while under way (see ``underway.may_park``)."""
        self._under_way.pauses += 1
        try:
            return await wait
        finally:
            self._under_way.pauses -= 1


class RunEngine:
    """The engine's side of one run: what the executor (and the offline replay) ask of it once its
    workflow returned or raised (``RunEngine(run)``); the workflow is handed the ``Run`` only."""

    def __init__(self, run: Run) -> None:
        self._app, self._replayer = run._app, run._replayer
        self._under_way, self._children, self._dispatcher = run._under_way, run._children, run._dispatcher

    @property
    def children_started(self) -> list[tuple[str, str]]:
        """(queue, id) of the child runs this attempt created (the sweeper hands them out too)."""
        return self._children.started

    async def ended(self) -> None:
        """The workflow returned or raised: wait for the crossings it left under way (calls, and
        waits for children); if one of those committed the run's wait, the run waits (the replay
        comes back to the same point, and the workflow ends then)."""
        await self._under_way.settled()
        await self._children.quiet()
        if self._children.suspended:
            raise Suspended()

    def check_consumed(self) -> None:
        self._replayer.check_consumed()

    async def compensate(self) -> dict[str, list[Any]]:
        return await compensate(self._app, self._replayer, self._dispatcher)
