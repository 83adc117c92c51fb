"""The approvals family stores requests for a person's decision, and the decisions."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

from outlast.store.base import Family


class Approvals(Family):
    """``Approvals`` requests an approval (fenced), reads requests, and decides one (waking its run)."""

    async def await_approval(
        self,
        run_id: str,
        token: int,
        op_id: str,
        *,
        action: str,
        args: dict[str, Any],
        args_hash: str,
        policy_version: str,
        approvers: list[str],
        expires_in: float | None,
        authenticated: bool = False,
    ) -> bool:
        """Record the request (once) and give up the lease to wait for a decision (fenced);
        ``authenticated``: only a principal the dashboard or the API authenticated may decide it."""
        rows = await self._write(
            "await_approval",
            id=f"{run_id}:{op_id}",
            run_id=run_id,
            token=token,
            op_id=op_id,
            action=action,
            args=Jsonb(args),
            args_hash=args_hash,
            policy_version=policy_version,
            approvers=approvers,
            expires_in=expires_in,
            authenticated=authenticated,
            detail=Jsonb({"approval": op_id, "action": action, "args_hash": args_hash}),
        )
        return bool(rows)

    async def approval(self, run_id: str, op_id: str) -> dict[str, Any] | None:
        rows = await self._rows("get_approval", run_id=run_id, op_id=op_id)
        return rows[0] if rows else None

    async def approvals(self, run_id: str) -> list[dict[str, Any]]:
        return await self._rows("approvals", run_id=run_id)

    async def decide(
        self,
        run_id: str,
        op_id: str,
        status: str,
        by: str,
        comment: str,
        new_args: dict[str, Any] | None,
        who: dict[str, Any],
    ) -> tuple[bool, str | None]:
        """Commit a decision on a pending, unexpired request and wake the run, in one statement;
        ``who`` is the decider's record (``Principal.record``). Returns (decided, queue to
        publish the run on, if it was woken)."""
        rows = await self._write(
            "decide",
            run_id=run_id,
            op_id=op_id,
            status=status,
            by=by,
            comment=comment,
            new_args=None if new_args is None else Jsonb(new_args),
            who=Jsonb(who),
            detail=Jsonb({"approval": op_id, "status": status, "by": by, "who": who, "comment": comment}),
        )
        return (True, rows[0]["queue"]) if rows else (False, None)

    async def pending_approvals(self, limit: int) -> list[dict[str, Any]]:
        """The requests still waiting for a decision, oldest first, with their run's workflow
        and queue and ``seconds_left`` (None without an expiry)."""
        return await self._rows("pending_approvals", limit=limit)

    async def publish_approval(
        self,
        run_id: str,
        token: int,
        op_id: str,
        *,
        action: str,
        args: dict[str, Any],
        args_hash: str,
        policy_version: str,
        approvers: list[str],
        expires_in: float | None,
        authenticated: bool = False,
    ) -> tuple[bool, datetime | None]:
        """Record an approval request of a ``run.first`` (once, fenced), before the run's wait.
        Returns (held, the request's expiry)."""
        rows = await self._write(
            "publish_approval",
            id=f"{run_id}:{op_id}",
            run_id=run_id,
            token=token,
            op_id=op_id,
            action=action,
            args=Jsonb(args),
            args_hash=args_hash,
            policy_version=policy_version,
            approvers=approvers,
            expires_in=expires_in,
            authenticated=authenticated,
        )
        return (True, rows[0]["expires_at"]) if rows else (False, None)

    async def withdraw_approvals(self, run_id: str, token: int, ops: list[str]) -> list[str]:
        """Expire now the pending approval requests ``ops`` that lost a ``run.first`` (fenced)."""
        return [
            r["op_id"] for r in await self._write("withdraw_approvals", run_id=run_id, token=token, ops=ops)
        ]
