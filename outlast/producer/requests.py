"""``Requests`` lists and answers from outside the typed requests a run publishes (``run.request``).

``respond`` checks the answer against the response type's JSON schema that the request stored
(``outlast._answers``, ``outlast._shapes``), commits the first valid one and wakes the run in one
statement, then publishes the run. The same answer again is accepted (``Answered.again``); a
different one is refused.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from outlast._answers import Verdict, judge, responder, who
from outlast._journal import Limit
from outlast._model import Answered
from outlast._payloads import ANSWER, by_reference, held_by_reference
from outlast.identity import Principal
from outlast.producer.checks import check_json
from outlast.producer.core import ClientCore

# How long ``respond`` looks again at a run not yet waiting on a pending request (it is between
# its wake-up and its wait: a replay takes milliseconds), before refusing.
_SETTLING = 5.0


def shown(row: dict[str, Any]) -> dict[str, Any]:
    """A request as the client shows it: its ``id`` (the operation that published it) first."""
    return {"id": row["op_id"], **{k: v for k, v in row.items() if k != "op_id"}}


class Requests(ClientCore):
    """The family of requests: list them, answer one."""

    async def requests(self, run_id: str, *, pending: bool = True) -> list[dict[str, Any]]:
        """The run's requests still waiting for an answer (unexpired), oldest first; with
        ``pending=False``, every one, answered and expired included. Each has its ``id``,
        ``name``, ``payload``, ``response_schema`` (the response type's JSON schema),
        ``responders``, ``expires_at``, ``status`` and, once answered, ``answer`` and ``answered_by``."""
        await self.status(run_id)
        rows = [shown(r) for r in await self.store.requests.requests(run_id)]
        return [r for r in rows if r["status"] == "pending" and not r["expired"]] if pending else rows

    async def respond(
        self,
        run_id: str,
        request_id: str,
        value: Any,
        *,
        by: str | None = None,
        principal: Principal | None = None,
    ) -> Answered:
        """Answer the request ``request_id`` of the run with ``value``, checked against its
        response type; the first valid answer is stored, then the run is woken. The same answer
        again is accepted (``again`` is True); a different one, or one to an expired request, is
        refused (``AnswerRefused``). The responder is ``principal`` when authenticated (the
        dashboard, the API); else ``by`` (the CLI's ``--by``), or the operating-system user."""
        where = f"run '{run_id}', request {request_id}"
        # a pydantic model or a dataclass as JSON, and no more than a payload may weigh
        # past OUTLAST_MAX_PAYLOAD, held by reference in the request's row (stored before it)
        text = check_json(
            value, "the answer", where, Limit(self.settings.max_referenced, "OUTLAST_MAX_REFERENCED")
        )
        value = json.loads(text)
        kept = value
        if by_reference(value, text, self.settings.max_payload):
            kept, sha, body = held_by_reference(ANSWER, text)
        p, name = responder(principal, by, where)
        record = who(p, name)
        asked = await self.status(run_id)
        until = time.monotonic() + _SETTLING
        stored = False
        while True:
            req = await self.store.requests.request(run_id, request_id)
            if judge(req, value, p, name, run_id, where) is Verdict.SAME_AGAIN:
                assert req is not None
                return Answered(run_id, request_id, req["answer"], req["answered_by"], True)
            if kept is not value and not stored:  # once, before the row that refers to it
                await self.store.requests.put_payloads(run_id, {sha: body})
                stored = True
            answered, queue = await self.store.requests.answer_request(run_id, request_id, kept, name, record)
            if answered:
                if queue is not None:
                    await self.queue.publish(queue, run_id, priority=asked.priority)
                return Answered(run_id, request_id, value, name, False)
            asked = await self.status(run_id)
            if asked.final or time.monotonic() > until:
                req = await self.store.requests.request(run_id, request_id)
                judge(req, value, p, name, run_id, where, run_state=str(asked.state))
            await asyncio.sleep(0.05)  # answered or expired meanwhile, or not waiting yet: look again
