"""``First`` makes waits compose.

``await run.first(run.request(...), run.sleep(86400), child.result())`` returns which wait won
and its value (``Won``).

A durable wait's call (``run.sleep``, ``run.sleep_until``, ``run.approval``, ``run.request``,
``child.result()``) returns a ``Wait``: awaited alone, it is that wait; given to ``run.first``, it is
one of the waits that race. Each wait is asked as it is alone (its position, and the entry that
asks it: ``timer``, ``approval``, ``request``), then the first that is ready wins: its outcome is
one journal entry (``first``: the waits, which won, its outcome), replayed the same way. While none
is ready the run waits with no worker held (reason ``first``; ``awaiting_approval`` when an approval
is among the waits, so that a decision finds it), woken at the earliest due time (a timer, an
expiry), by an answer, a decision, or the end of its child. The losing waits are withdrawn: a
request is ``withdrawn`` (an answer is refused), an approval request expires, a timer is nothing
the run waits for any more, a child runs on unawaited. When more than one is ready by the time the
run looks, the first in the order given wins. A wait is a kind of crossing, so a wait of another
kind (a message's ``receive``) joins by giving its ask, readiness, value, withdrawal and what the
run's wait needs (``_Branch``).
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from outlast.errors import Fenced, InvalidInput
from outlast.worker.control import Suspended
from outlast.worker.requests import RunRequests
from outlast.worker.wait import Wait, Won
from outlast.worker.waits import Waits

if TYPE_CHECKING:
    from outlast.worker.children import RunChildren


class First:
    """The run's composed waits."""

    def __init__(self, requests: RunRequests, waits: Waits, children: RunChildren) -> None:
        self.run_id = requests.run_id
        self._store, self._control, self._writes = requests.store, requests.control, requests.writes
        self._replayer, self._settled = requests.replayer, requests.settled
        self._waits = waits
        self._requests = requests
        self._children = children

    async def first(self, op_id: str, waits: list[Wait[Any]]) -> Won:
        checked(self.run_id, waits)
        ops = [w.op_id for w in waits]
        asked = [await self._ask(w) for w in waits]
        r = self._replayer
        r.enter(op_id)
        if r.journaled(op_id):
            e = r.entry(op_id, "first")
            if e is None or e.data["ops"] != ops:
                raise r.mismatch(op_id, f"first of {', '.join(ops)}")
            if not self._control.offline and e.seq == r.journal.length:  # a crash may have cut its withdrawal
                await self._withdraw(waits, e.data["won"])
            return Won(
                e.data["won"], self._value(waits[e.data["won"]], asked[e.data["won"]], e.data["outcome"])
            )
        await r.go_live(op_id, lambda: f"first of {', '.join(ops)}")
        now = await self._control.db(self._store.db_now())
        for i, (w, a) in enumerate(zip(waits, asked, strict=True)):
            outcome = await self._outcome(w, a, now)
            if outcome is not None:
                await r.append("first", op_id, {"ops": ops, "won": i, "won_kind": w.kind, "outcome": outcome})
                await self._withdraw(waits, i)
                return Won(i, self._value(w, a, outcome))
        await self._settled()  # parallel calls journal their results before the run lets go
        await r.go_live(op_id, lambda: f"the first of {', '.join(ops)}")
        await self._wait(op_id, waits, asked)
        raise AssertionError("unreachable")  # _wait raises Suspended

    async def _ask(self, w: Wait[Any]) -> Any:
        s = w.spec
        if w.kind == "timer":
            due, _ = await self._waits.due(w.op_id, s.get("seconds", 0.0), s.get("until"))
            return due
        if w.kind == "approval":
            return await self._waits.ask_approval(w.op_id, **s)
        if w.kind == "request":
            return await self._requests.ask(w.op_id, **s)
        self._replayer.enter(w.op_id)  # a child's result: its outcome is the first entry's
        return s["child"]

    async def _outcome(self, w: Wait[Any], asked: Any, now: datetime) -> dict[str, Any] | None:
        if w.kind == "timer":
            return {"until": asked.isoformat()} if asked <= now else None
        if w.kind == "approval":
            return await self._waits.approval_outcome(w.op_id, asked.clean)
        if w.kind == "request":
            return await self._requests.outcome(w.op_id)
        found = await self._control.db(self._store.get_run(asked.id))
        if found is None or not found.final:
            return None
        return {"child": asked.id, "state": str(found.state), "result": found.result, "reason": found.reason}

    def _value(self, w: Wait[Any], asked: Any, outcome: dict[str, Any]) -> Any:
        if w.kind == "timer":
            return None
        if w.kind == "approval":
            return self._waits.decision(w.op_id, asked.action, outcome, asked.real)
        if w.kind == "request":
            return self._requests.answer(w.op_id, asked, outcome)
        return self._children.outcome(asked, outcome)

    async def _withdraw(self, waits: list[Wait[Any]], won: int) -> None:
        """The losing requests withdrawn and approval requests expired (fenced, idempotent)."""
        token = self._control.token
        lost = [w for i, w in enumerate(waits) if i != won]
        requests = [w.op_id for w in lost if w.kind == "request"]
        approvals = [w.op_id for w in lost if w.kind == "approval"]
        if requests:
            await self._control.db(
                self._writes.fenced("withdraw", self._store.withdraw_requests(self.run_id, token, requests))
            )
        if approvals:
            await self._control.db(
                self._writes.fenced("withdraw", self._store.withdraw_approvals(self.run_id, token, approvals))
            )

    async def _wait(self, op_id: str, waits: list[Wait[Any]], asked: list[Any]) -> None:
        """Publish the requests among the waits, then the run's wait (each fenced); raise ``Suspended``."""
        token, dues = self._control.token, []
        for w, a in zip(waits, asked, strict=True):
            if w.kind == "timer":
                dues.append(a)
                continue
            if w.kind == "approval":
                made = self._store.publish_approval(self.run_id, token, w.op_id, **a.row())
            elif w.kind == "request":
                made = self._store.publish_request(self.run_id, token, w.op_id, **a.row())
            else:
                continue
            held, expires = await self._control.db(self._writes.fenced("publish", made))
            if not held:
                raise Fenced(self.run_id, token)
            if expires is not None:
                dues.append(expires)
        children = [a.id for w, a in zip(waits, asked, strict=True) if w.kind == "child"]
        wake_at = min(dues, default=None)
        state = "awaiting_approval" if any(w.kind == "approval" for w in waits) else "waiting"
        detail = {"reason": "first", "ops": [w.op_id for w in waits], "kinds": [w.kind for w in waits]}
        waiting = self._store.wait_first(
            self.run_id,
            token,
            state=state,
            wake_at=wake_at,
            child=children[0] if children else None,
            detail=detail | {"first": op_id},
        )
        if not await self._control.db(self._writes.fenced("wait", waiting)):
            raise Fenced(self.run_id, token)
        raise Suspended(wake_at)


def checked(run_id: str, waits: list[Any]) -> None:
    """Waits made by this run and not begun: at least one, at most one child's result."""
    if not waits:
        raise InvalidInput(f"run '{run_id}': first() needs at least one wait")
    for w in waits:
        if not isinstance(w, Wait):
            raise InvalidInput(
                f"run '{run_id}': first() takes waits (run.sleep, run.sleep_until, run.approval, "
                f"run.request, child.result()), not {type(w).__name__}"
            )
    if sum(w.kind == "child" for w in waits) > 1:
        raise InvalidInput(f"run '{run_id}': first() waits for one child's result at most")
    if len({w.op_id for w in waits}) != len(waits):
        raise InvalidInput(f"run '{run_id}': first() was given the same wait twice")
