"""``First`` makes waits compose.

``await run.first(run.request(...), run.sleep(86400), child.result())`` returns which wait won
and its value (``Won``).

A durable wait's call (``run.sleep``, ``run.sleep_until``, ``run.approval``, ``run.request``,
``run.receive``, ``child.result()``) returns a ``Wait``: awaited alone, it is that wait; given to
``run.first``, it is one of the waits that race. Each wait is asked as it is alone (its position,
and the entry that asks it: ``timer``, ``approval``, ``request``, a receive's ``receive`` for its
timeout), then the first that is ready wins: its outcome is
one journal entry (``first``: the waits, which won, its outcome), replayed the same way. While none
is ready the run waits with no worker held (reason ``first``; ``awaiting_approval`` when an approval
is among the waits, so that a decision finds it), woken at the earliest due time (a timer, an
expiry), by an answer, a decision, the end of its child, or a message on a channel it receives
on (``waits_channels``: a send wakes it; the wait commits only if no message was accepted since the
run looked, as a receive's does). A receive that wins takes its message in the statement that
journals the ``first`` entry; one that loses takes nothing (the message stays for the next
receive). The losing waits are withdrawn: a request is ``withdrawn`` (an answer is refused), an
approval request expires, a timer is nothing the run waits for any more, a child runs on
unawaited. When more than one is ready by the time the run looks, the first in the order given
wins. A wait of another kind joins by giving its ask, readiness, value, withdrawal and what the
run's wait needs.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from outlast.errors import Fenced, InvalidInput
from outlast.store.approvals import Approvals
from outlast.store.first import Firsts
from outlast.store.requests import Requests
from outlast.store.runs import Runs
from outlast.store.sweeps import Sweeps
from outlast.worker.control import Suspended
from outlast.worker.inbox import Inbox
from outlast.worker.requests import RunRequests
from outlast.worker.wait import Wait, Won

if TYPE_CHECKING:
    from outlast.worker.children import RunChildren


class First:
    """The run's composed waits."""

    def __init__(
        self,
        requests: RunRequests,
        waits: Inbox,
        children: RunChildren,
        *,
        firsts: Firsts,
        request_rows: Requests,
        runs: Runs,
        approvals: Approvals,
        sweeps: Sweeps,
    ) -> None:
        self.run_id = requests.run_id
        # the families its composed waits write and read
        self._firsts, self._runs, self._approvals, self._sweeps = firsts, runs, approvals, sweeps
        self._request_rows = request_rows
        self._control, self._writes = requests.control, requests.writes
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
        while True:
            won, seen = await self._race(op_id, waits, asked)
            if won is not None:
                return won
            await self._settled()  # parallel calls journal their results before the run lets go
            await r.go_live(op_id, lambda: f"the first of {', '.join(ops)}")
            await self._wait(op_id, waits, asked, seen)  # raises Suspended, or a message came: look again

    async def _race(
        self, op_id: str, waits: list[Wait[Any]], asked: list[Any]
    ) -> tuple[Won | None, int | None]:
        """The first ready wait, journaled (a message taken by the same statement), and its losers
        withdrawn; or None and the run's count of accepted messages at its first look (None: no
        receive among the waits), which the run's wait must still find."""
        seen: int | None = None
        async with self._waits.taking:  # a parallel receive never takes the message looked at
            now = await self._control.db(self._sweeps.db_now())
            for i, (w, a) in enumerate(zip(waits, asked, strict=True)):
                if w.kind == "message":
                    outcome, count = await self._message(w, a, now)
                    seen = count if seen is None else seen
                else:
                    outcome = await self._outcome(w, a, now)
                if outcome is None:
                    continue
                data = {"ops": [w.op_id for w in waits], "won": i, "won_kind": w.kind, "outcome": outcome}
                await self._replayer.append("first", op_id, data, take=outcome.get("message_id"))
                break
            else:
                return None, seen
        await self._withdraw(waits, i)
        return Won(i, self._value(w, a, outcome)), seen

    async def _message(
        self, w: Wait[Any], until: datetime | None, now: datetime
    ) -> tuple[dict[str, Any] | None, int]:
        """A receive's outcome: the channel's oldest message (taken if it wins), its timeout if
        due, or None; and the run's count of accepted messages."""
        channel = w.spec["channel"]
        data, seen = await self._waits.look(channel)
        if data is None and until is not None and until <= now:
            data = {"channel": channel, "timeout": True}
        return data, seen

    async def _ask(self, w: Wait[Any]) -> Any:
        s = w.spec
        if w.kind == "timer":
            due, _ = await self._waits.due(w.op_id, s.get("seconds", 0.0), s.get("until"))
            return due
        if w.kind == "approval":
            return await self._waits.ask_approval(w.op_id, **s)
        if w.kind == "request":
            return await self._requests.ask(w.op_id, **s)
        if w.kind == "message":  # its timeout's due time (journaled once), or None
            self._waits.check_receive(s["channel"], s["timeout"])
            self._replayer.enter(w.op_id)
            return await self._waits.timer(w.op_id, s["channel"], s["timeout"])
        self._replayer.enter(w.op_id)  # a child's result: its outcome is the first entry's
        return s["child"]

    async def _outcome(self, w: Wait[Any], asked: Any, now: datetime) -> dict[str, Any] | None:
        if w.kind == "timer":
            return {"until": asked.isoformat()} if asked <= now else None
        if w.kind == "approval":
            return await self._waits.approval_outcome(w.op_id, asked.clean)
        if w.kind == "request":
            return await self._requests.outcome(w.op_id)
        found = await self._control.db(self._runs.get_run(asked.id))
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
        if w.kind == "message":
            return self._waits.served(w.spec["channel"], outcome)
        return self._children.outcome(asked, outcome)

    async def _withdraw(self, waits: list[Wait[Any]], won: int) -> None:
        """The losing requests withdrawn and approval requests expired (fenced, idempotent)."""
        token = self._control.token
        lost = [w for i, w in enumerate(waits) if i != won]
        requests = [w.op_id for w in lost if w.kind == "request"]
        approvals = [w.op_id for w in lost if w.kind == "approval"]
        if requests:
            await self._control.db(
                self._writes.fenced(
                    "withdraw", self._request_rows.withdraw_requests(self.run_id, token, requests)
                )
            )
        if approvals:
            await self._control.db(
                self._writes.fenced(
                    "withdraw", self._approvals.withdraw_approvals(self.run_id, token, approvals)
                )
            )

    async def _wait(self, op_id: str, waits: list[Wait[Any]], asked: list[Any], seen: int | None) -> None:
        """Publish the requests among the waits, then the run's wait (each fenced); raise
        ``Suspended``. Returns if a message was accepted since the count ``seen``: look again."""
        token, dues, said = self._control.token, [], []
        for w, a in zip(waits, asked, strict=True):
            due = a if w.kind in ("timer", "message") else None
            if w.kind in ("approval", "request"):
                if w.kind == "approval":
                    made = self._approvals.publish_approval(self.run_id, token, w.op_id, **a.row())
                else:
                    made = self._request_rows.publish_request(self.run_id, token, w.op_id, **a.row())
                held, due = await self._control.db(self._writes.fenced("publish", made))
                if not held:
                    raise Fenced(self.run_id, token)
            if due is not None:
                dues.append(due)
            said.append({"op": w.op_id, "kind": w.kind, "on": _on(w), "due": due and due.isoformat()})
        children = [a.id for w, a in zip(waits, asked, strict=True) if w.kind == "child"]
        wake_at = min(dues, default=None)
        state = "awaiting_approval" if any(w.kind == "approval" for w in waits) else "waiting"
        ops, kinds = [w.op_id for w in waits], [w.kind for w in waits]
        # ``waits``: what ``outlast status`` lists, each wait and its due time
        detail = {"reason": "first", "ops": ops, "kinds": kinds, "waits": said}
        waiting = self._firsts.wait_first(
            self.run_id,
            token,
            state=state,
            wake_at=wake_at,
            child=children[0] if children else None,
            detail=detail | {"first": op_id},
            channels=[w.spec["channel"] for w in waits if w.kind == "message"],
            seen=seen,
        )
        if await self._control.db(self._writes.fenced("wait", waiting)):
            raise Suspended(wake_at)
        if seen is None:
            raise Fenced(self.run_id, token)
        # not committed: a message came since the look (or the run was taken over: the look says)


def _on(w: Wait[Any]) -> str:
    """What a wait among a first's waits waits on, for a person to read."""
    s = w.spec
    if w.kind == "message":
        return f"a message on {s['channel']!r}"
    if w.kind == "approval":
        return f"a decision on {s['action']} (approvers: {', '.join(s['approvers'])})"
    if w.kind == "request":
        return f"an answer to {s['name']!r}"
    if w.kind == "child":
        return f"child run {s['child'].id}"
    return "a timer"


def checked(run_id: str, waits: list[Any]) -> None:
    """Waits made by this run and not begun: at least one, at most one child's result."""
    if not waits:
        raise InvalidInput(f"run '{run_id}': first() needs at least one wait")
    for w in waits:
        if not isinstance(w, Wait):
            raise InvalidInput(
                f"run '{run_id}': first() takes waits (run.sleep, run.sleep_until, run.approval, "
                f"run.request, run.receive, child.result()), not {type(w).__name__}"
            )
    if sum(w.kind == "child" for w in waits) > 1:
        raise InvalidInput(f"run '{run_id}': first() waits for one child's result at most")
    if len({w.op_id for w in waits}) != len(waits):
        raise InvalidInput(f"run '{run_id}': first() was given the same wait twice")
