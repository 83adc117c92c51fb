"""The requests family stores typed requests a run publishes and waits on, and their answers."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

from outlast._payloads import ANSWER
from outlast.store.payloads import Payloads


class Requests(Payloads):
    """Publish a request with the run's wait (fenced), read requests, answer one (waking its run)."""

    async def await_request(
        self,
        run_id: str,
        token: int,
        op_id: str,
        *,
        name: str,
        payload: Any,
        response_schema: dict[str, Any],
        responders: list[str],
        expires_in: float | None,
    ) -> bool:
        """Record the request (once) and give up the lease to wait for its answer (fenced)."""
        rows = await self._write(
            "await_request",
            run_id=run_id,
            token=token,
            op_id=op_id,
            req_name=name,
            payload=Jsonb(payload),
            response_schema=Jsonb(response_schema),
            responders=responders,
            expires_in=expires_in,
            detail=Jsonb({"reason": "request", "request": op_id, "name": name}),
        )
        return bool(rows)

    async def request(self, run_id: str, op_id: str) -> dict[str, Any] | None:
        """The request, its answer whole (read back if held by reference)."""
        rows = await self._rows("get_request", run_id=run_id, op_id=op_id)
        await self._read_back(run_id, rows, "answer", ANSWER)
        return rows[0] if rows else None

    async def requests(self, run_id: str) -> list[dict[str, Any]]:
        """The run's requests, their answers whole (read back if held by reference)."""
        rows = await self._rows("run_requests", run_id=run_id)
        await self._read_back(run_id, rows, "answer", ANSWER)
        return rows

    async def answer_request(
        self, run_id: str, op_id: str, answer: Any, by: str, who: dict[str, Any]
    ) -> tuple[bool, str | None]:
        """Commit the first answer of a pending, unexpired request and wake its run, in one
        statement. Returns (answered, queue to publish the run on, if it was woken)."""
        rows = await self._write(
            "answer_request",
            run_id=run_id,
            op_id=op_id,
            answer=Jsonb(answer),
            by=by,
            who=Jsonb(who),
            detail=Jsonb({"request": op_id, "by": by, "who": who}),
        )
        return (True, rows[0]["queue"]) if rows else (False, None)

    async def publish_request(
        self,
        run_id: str,
        token: int,
        op_id: str,
        *,
        name: str,
        payload: Any,
        response_schema: dict[str, Any],
        responders: list[str],
        expires_in: float | None,
    ) -> tuple[bool, datetime | None]:
        """Record a request of a ``run.first`` (once, fenced), before the run's wait. Returns
        (held: the lease was still this token's, the request's expiry)."""
        rows = await self._write(
            "publish_request",
            run_id=run_id,
            token=token,
            op_id=op_id,
            req_name=name,
            payload=Jsonb(payload),
            response_schema=Jsonb(response_schema),
            responders=responders,
            expires_in=expires_in,
        )
        return (True, rows[0]["expires_at"]) if rows else (False, None)

    async def withdraw_requests(self, run_id: str, token: int, ops: list[str]) -> list[str]:
        """Withdraw the pending requests ``ops`` that lost a ``run.first`` (fenced)."""
        return [
            r["op_id"] for r in await self._write("withdraw_requests", run_id=run_id, token=token, ops=ops)
        ]
