"""This family takes the decisions a person makes about a run: approval requests (approve, reject,
revise) and the resolution of an in-doubt operation."""

from __future__ import annotations

from typing import Any

from outlast._approvals import Proposed, Verdict, check_comment, decider, judge
from outlast._journal import make_entry, operation_state
from outlast._model import RunRecord, RunState
from outlast.errors import InvalidInput, NotInDoubt, RunChanged, RunNotWaiting, UnknownApproval
from outlast.identity import Principal, cli_principal
from outlast.producer.checks import check_json
from outlast.producer.core import ClientCore
from outlast.store import OnWait


class Decisions(ClientCore):
    """``Decisions`` is the family of decisions: approval requests and in-doubt resolutions."""

    async def approvals(self, run_id: str) -> list[dict[str, Any]]:
        """The run's approval requests, with their decisions."""
        await self.status(run_id)
        return await self.store.approvals.approvals(run_id)

    async def approval(self, run_id: str, approval_id: str) -> dict[str, Any]:
        """One approval request of the run, with its decision; ``UnknownApproval`` if none."""
        await self.status(run_id)
        req = await self.store.approvals.approval(run_id, approval_id)
        if req is None:
            raise UnknownApproval(run_id, approval_id)
        return req

    async def approve(
        self,
        run_id: str,
        approval_id: str,
        *,
        comment: str,
        args_hash: str,
        principal: Principal | None = None,
        approver: str | None = None,
    ) -> RunRecord:
        """Approve the request ``approval_id`` of the run for the exact action whose arguments
        hash to ``args_hash`` (what the decider saw). The decider is ``principal`` when it was
        authenticated (the dashboard, the API); the CLI's principal (or none, for a program)
        decides as ``approver`` (the CLI's ``--as``), and its user and host are recorded beside."""
        return await self._decide(run_id, approval_id, "approved", comment, args_hash, principal, approver)

    async def reject(
        self,
        run_id: str,
        approval_id: str,
        *,
        comment: str,
        args_hash: str,
        principal: Principal | None = None,
        approver: str | None = None,
    ) -> RunRecord:
        """Reject the request (the decider as for ``approve``); unless the workflow handles it,
        the run ends ``failed``."""
        return await self._decide(run_id, approval_id, "rejected", comment, args_hash, principal, approver)

    async def revise(
        self,
        run_id: str,
        approval_id: str,
        *,
        comment: str,
        args_hash: str,
        args: dict[str, Any],
        principal: Principal | None = None,
        approver: str | None = None,
    ) -> RunRecord:
        """Close the request as revised with new arguments (the decider as for ``approve``); the
        workflow receives them, and acting on them needs a new approval."""
        where = f"run '{run_id}', approval {approval_id}"
        if not isinstance(args, dict):
            raise InvalidInput(f"{where}: revised arguments must be a JSON object, got {type(args).__name__}")
        check_json(args, "the revised arguments", where, self.settings.max_payload)
        return await self._decide(
            run_id, approval_id, "revised", comment, args_hash, principal, approver, args
        )

    async def _decide(
        self,
        run_id: str,
        approval_id: str,
        status: str,
        comment: str,
        args_hash: str,
        principal: Principal | None,
        approver: str | None,
        new_args: dict[str, Any] | None = None,
    ) -> RunRecord:
        where = f"run '{run_id}', approval {approval_id}"
        check_comment(comment, where)
        who, name = decider(principal, approver, where)
        proposed = Proposed(status, who, name, comment, args_hash, new_args)
        asked = await self.status(run_id)
        req = await self.store.approvals.approval(run_id, approval_id)
        if judge(req, proposed, run_id, where) is Verdict.DECIDE:
            decided, queue = await self.store.approvals.decide(
                run_id, approval_id, status, name, comment, new_args, proposed.who()
            )
            if decided:
                if queue is not None:
                    await self.queue.publish(queue, run_id, priority=asked.priority)
                return await self.status(run_id)
            req = await self.store.approvals.approval(run_id, approval_id)  # decided or expired meanwhile
            run = await self.status(run_id)
            judge(req, proposed, run_id, where, run_state=run.state)
        return await self.status(run_id)  # the same decision again: accepted, changes nothing

    async def pending_approvals(self, limit: int = 200) -> list[dict[str, Any]]:
        """Every approval request still waiting for a decision, across runs, oldest first."""
        await self.open()
        return await self.store.approvals.pending_approvals(limit)

    async def resolve(
        self,
        run_id: str,
        operation_id: str,
        *,
        executed: bool,
        result: Any = None,
        principal: Principal | None = None,
        comment: str | None = None,
    ) -> RunRecord:
        """Record how an in-doubt operation ended, in the journal, and wake the run. The journal
        and the ``resolved`` event name who resolved it (``principal``; without one, the
        operating-system user and host of this program) and why (``comment``, when given)."""
        where = f"run '{run_id}', operation {operation_id}"
        if comment is not None:
            check_comment(comment, where)
        if executed:
            check_json(result, "the result", where, self.settings.max_payload)
        run = await self.status(run_id)
        entries = await self.store.journal.journal(run_id)
        if operation_state(e for e in entries if e.op_id == operation_id)[0] != "in_doubt":
            raise NotInDoubt(
                f"run '{run_id}': operation {operation_id} is not in doubt "
                f"(see the in-doubt operations with: outlast status {run_id})"
            )
        if run.state != RunState.WAITING or run.reason != "in_doubt":
            raise RunNotWaiting(f"run '{run_id}' is {run.state}, not waiting on an in-doubt operation")
        who = (principal or cli_principal("client")).record()
        data: dict[str, Any] = {"how": "operator", "executed": executed, "who": who}
        if comment is not None:
            data["comment"] = comment
        if executed:
            data["result"] = result
        entry = make_entry(run.journal_head, run.journal_len + 1, "resolution", operation_id, data)
        if await self.store.journal.append(run_id, OnWait("in_doubt", run.journal_head), entry) is None:
            raise RunChanged(f"run '{run_id}' changed while resolving; look again: outlast status {run_id}")
        if executed and run.budget_id is not None:
            # It happened: what it reserved is spent (its estimate is all that is known).
            held = await self.store.budgets.reservations(run_id, operation_id)
            await self.store.budgets.settle(run.budget_id, run_id, operation_id, held, expected=True)
        detail = {"op": operation_id, "executed": executed, "who": who, "comment": comment}
        await self.store.runs.event(run_id, "resolved", detail)
        await self.queue.publish(run.queue, run_id, priority=run.priority)
        return await self.status(run_id)
