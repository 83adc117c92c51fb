"""An operation must pass two checks before it goes live, beside its slot and rate (``flow.Gate``) and its
lease. They are the app's policy hook (a refusal is journaled, and raised as ``PolicyRefused``) and the
run's budget (the tool's declared cost reserved, fenced; ``BudgetExhausted`` when over)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from outlast.errors import BudgetExhausted, PolicyRefused
from outlast.store.budgets import Budgets
from outlast.worker.op import Op
from outlast.worker.scope import RunScope


class OperationAdmission:
    """``OperationAdmission`` makes one run's policy verdicts and budget reservations."""

    def __init__(self, scope: RunScope, *, budgets: Budgets, handle: Callable[[], Any]) -> None:
        self.run_id = scope.run_id
        self.budget_id = scope.record.budget_id
        self._app = scope.app
        self._budgets = budgets
        self._control = scope.control
        self._writes = scope.writes
        self._replayer = scope.replayer
        self._secrets = scope.secrets
        self._handle = handle  # the workflow's ``run`` (a weak reference), for the policy hook

    async def policy(self, op: Op) -> None:
        hook = self._app.policy_hook
        if hook is None:
            return
        verdict = hook(op.name, op.args, self._handle())
        if isinstance(verdict, Awaitable):
            verdict = await verdict
        if verdict is None or verdict is True:
            return
        # The hook saw the call's own values: its words are stored and raised only redacted.
        reason = "refused by policy"
        if isinstance(verdict, str):
            reason = self._secrets.redact(op.name, op.args, verdict)
        refused = {"tool": op.name, "args": op.sealed, "args_hash": op.args_hash, "reason": reason}
        await self._replayer.append("refused", op.id, refused)
        raise PolicyRefused(self.run_id, op.name, reason)

    async def reserve(self, op: Op) -> dict[str, float]:
        tool = op.tool
        if self.budget_id is None or not tool.cost:
            return {}
        reserve = self._budgets.reserve(self.budget_id, self.run_id, op.id, tool.cost)
        over = await self._control.db(self._writes.fenced("reserve", reserve))
        if over:
            raise BudgetExhausted(self.run_id, tool.name, over)
        return dict(tool.cost)
