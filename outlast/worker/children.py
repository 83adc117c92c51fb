"""``run.start`` starts a child run, and ``child.result()`` waits for it with no worker held.

A child's id is derived from the parent's run id and the operation that starts it, so a resumed
parent finds the same child and never starts a second. The child row is committed first (fenced
by the parent's lease, idempotent on its id), then the start is journaled: a crash between the two
only starts it again with the same id, which finds it. Waiting for a child is a durable wait
(state ``waiting``, reason ``child``); the sweeper wakes the parent once the child is final, and
the child's outcome is journaled at the parent's crossing, so a replay serves it from memory.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

from outlast import _failpoints as failpoints, _tracing as tracing
from outlast._journal import Entry, Unstorable, canonical, digest
from outlast._model import RunState
from outlast._payloads import INPUT, by_reference, held_by_reference
from outlast.errors import ChildFailed, Fenced, InvalidInput, RunConflict, UnknownRun
from outlast.queue import MAX_RUN_ID
from outlast.settings import check_name
from outlast.store.children import Children
from outlast.store.runs import Runs
from outlast.worker.control import Suspended
from outlast.worker.replayer import describe
from outlast.worker.scope import RunScope
from outlast.worker.wait import Wait

# A child ending so gives its result to the parent (a partial one: {"output", "unfinished"}).
_DELIVERED = (RunState.SUCCEEDED, RunState.PARTIAL)


class Child:
    """A ``Child`` is the parent's handle on a child run it started: its ``id`` and ``workflow``, and
    ``result()``, a crossing of the parent."""

    def __init__(self, children: RunChildren, id: str, workflow: str) -> None:
        self._children = children
        self.id = id
        self.workflow = workflow

    def result(self) -> Wait[Any]:
        """The child's result once it is final: the parent waits durably meanwhile (reason
        ``child``, no worker held). A child that ended other than succeeded or partial raises
        ``ChildFailed``, which the workflow may catch. The crossing's position is fixed here (a
        ``Wait``: awaited, or given to ``run.first``)."""
        op_id, children = self._children.position(), self._children
        return Wait("child", op_id, {"child": self}, lambda: children.result(op_id, self))

    def __repr__(self) -> str:
        return f"Child({self.id!r}, {self.workflow!r})"


class RunChildren:
    """``RunChildren`` starts the run's child runs and waits for them."""

    def __init__(
        self, scope: RunScope, *, children: Children, runs: Runs, settled: Callable[[], Awaitable[None]]
    ) -> None:
        record = scope.record
        self.run_id = record.id
        self._queue = record.queue
        self._app = scope.app
        self._child_rows, self._runs = children, runs
        self._control = scope.control
        self._writes = scope.writes
        self._replayer = scope.replayer
        self._settled = settled  # calls made in parallel journal their results before a wait
        self._max_payload = scope.max_payload
        self._one_at_a_time = asyncio.Lock()  # parallel result() crossings: one wait, not several
        self.suspended = False  # a result() crossing committed the run's wait for its child
        self.waiting = 0  # result() crossings under way
        # Set while no result() crossing is under way; made at the first (most runs have none).
        self._quiet: asyncio.Event | None = None
        self.started: list[tuple[str, str]] = []  # (queue, id) of the children this attempt created

    def position(self) -> str:
        return self._replayer.position()

    async def start(self, op_id: str, workflow: str, input: dict[str, Any], queue: str | None) -> Child:
        r = self._replayer
        r.enter(op_id)
        where = f"run '{self.run_id}', {op_id}: child run of '{workflow}'"
        if not isinstance(input, dict):
            raise InvalidInput(f"{where}: the input must be a JSON object, got {type(input).__name__}")
        try:  # held by reference past OUTLAST_MAX_PAYLOAD (in the child's row), so bounded by this
            text = canonical(input, self._writes.referenced or self._max_payload)
        except Unstorable as exc:
            raise Unstorable(f"{where}: {exc}") from None
        ihash = digest(text)
        if r.journaled(op_id):
            e = r.entry(op_id, "child")
            if e is None or (e.data["workflow"], e.data["input_hash"]) != (workflow, ihash):
                raise r.mismatch(op_id, f"start of child {describe(workflow, input)}")
            return Child(self, e.data["child"], workflow)
        program = self._app.get_workflow(workflow).program  # an unknown workflow: refused here
        if queue is not None:
            try:
                check_name(queue)
            except ValueError as exc:
                raise InvalidInput(f"{where}: the queue {exc}") from None
        child_id = f"{self.run_id}:{op_id}"
        if len(child_id) > MAX_RUN_ID:  # an entry naming it would be dead-lettered as poison
            raise InvalidInput(
                f"{where}: the child's id {child_id[:40]!r}... would be longer than {MAX_RUN_ID} "
                "characters (children nested too deep, or a long run id)"
            )
        await r.go_live(op_id, lambda: f"start of child {describe(workflow, input)}")
        row: dict[str, Any] = {
            "id": child_id,
            "workflow": workflow,
            "queue": queue or self._app.queue_of(workflow) or self._queue,
            "input": await self._held(child_id, input, text),
            "input_hash": ihash,
            "program": program,
            "trace_context": tracing.carrier(),
        }
        got = await self._control.db(
            self._writes.fenced("child", self._child_rows.insert_child(self.run_id, self._control.token, row))
        )
        if not got.held:
            self._control.dispatch_stopped = True
            raise Fenced(self.run_id, self._control.token)
        if got.cancel_requested:
            self._control.cancelled()
            await r.go_live(op_id)  # journals the cancellation here and raises Cancelled
        failpoints.hit("before_child_journaled")
        if not got.created:  # started before a crash, its start not journaled: it must be the same
            await self._same_child(child_id, workflow, ihash)
        await r.append("child", op_id, {"workflow": workflow, "child": child_id, "input_hash": ihash})
        if not got.held_back:  # else published in its tenant's turn (a claim or the sweeper)
            self.started.append((str(row["queue"]), child_id))
        return Child(self, child_id, workflow)

    async def _held(self, child_id: str, input: dict[str, Any], text: str) -> dict[str, Any]:
        """The child's input as its row holds it: past ``OUTLAST_MAX_PAYLOAD``, its reference, the
        value stored first under the child's id (an orphan the sweeper deletes if the row never
        comes); else the value itself."""
        limit = self._writes.inline_max
        if limit is None or not by_reference(input, text, limit):
            held: dict[str, Any] = json.loads(text)
            return held
        held, sha, body = held_by_reference(INPUT, text)
        await self._control.db(self._runs.put_payloads(child_id, {sha: body}))
        return held

    async def _same_child(self, child_id: str, workflow: str, ihash: str) -> None:
        found = await self._control.db(self._runs.get_run(child_id))
        if found is None:
            raise UnknownRun(child_id)
        if found.workflow != workflow:
            raise RunConflict(child_id, f"workflow ('{found.workflow}')")
        if digest(canonical(found.input)) != ihash:
            raise RunConflict(child_id, "input")

    async def quiet(self) -> None:
        """Wait for the result() crossings under way (a sibling of a ``gather`` that raised goes
        on: it journals the child's outcome, or commits the run's wait for it)."""
        if self._quiet is not None:
            await self._quiet.wait()

    async def result(self, op_id: str, child: Child) -> Any:
        self.waiting += 1
        quiet = self._quiet = self._quiet or asyncio.Event()
        quiet.clear()
        try:
            return await self._result(op_id, child)
        finally:
            self.waiting -= 1
            if self.waiting == 0:
                quiet.set()

    async def _result(self, op_id: str, child: Child) -> Any:
        r = self._replayer
        r.enter(op_id)
        if r.journaled(op_id):
            e = r.entry(op_id, "child_result")
            if e is None or e.data["child"] != child.id:
                raise r.mismatch(op_id, f"result of child run {child.id}")
            return self._outcome(child, e)
        async with self._one_at_a_time:
            if self.suspended:  # a sibling crossing committed the wait: unwind with it
                raise Suspended()
            await r.go_live(op_id, lambda: f"result of child run {child.id}")
            found = await self._control.db(self._runs.get_run(child.id))
            if found is None:
                raise UnknownRun(child.id)
            if found.final:
                data = {"child": child.id, "state": str(found.state), "result": found.result}
                data["reason"] = found.reason
                return self._outcome(child, await r.append("child_result", op_id, data))
            await self._settled()  # as for a timer: parallel calls journal their results first
            await r.go_live(op_id)
            message = f"waiting for child run {child.id} ({child.workflow}, {found.state})"
            waiting = self._child_rows.wait_child(self.run_id, self._control.token, child.id, message)
            if not await self._control.db(self._writes.fenced("wait", waiting)):
                raise Fenced(self.run_id, self._control.token)
            self.suspended = True
            raise Suspended()

    def _outcome(self, child: Child, e: Entry) -> Any:
        return self.outcome(child, e.data)

    def outcome(self, child: Child, d: dict[str, Any]) -> Any:
        """The child's result, as journaled (``d``: its final state, result and reason), or
        ``ChildFailed`` when it did not succeed."""
        if RunState(d["state"]) in _DELIVERED:
            return d["result"]
        raise ChildFailed(child.id, child.workflow, d["state"], d["reason"])
