"""``RunRequests`` publishes a typed request (``run.request``) with the run's wait, no worker held.

Its answer is journaled once and given to the workflow as an instance of its response type.

Asking is journaled first (a ``request`` entry: name, payload and its hash, the response type's
JSON schema, responders, expiry); then the request and the run's wait are committed in one fenced
statement (``await_request``), so an answer can only find a run that waits for it. On the next
take the answer (or the expiry) is journaled (a ``response`` entry) and the workflow goes on; every
later replay reads it from the journal, never from the request again.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import structlog
from pydantic import PydanticUserError, TypeAdapter, ValidationError

from outlast._journal import args_hash, jsonable
from outlast.errors import Fenced, InvalidInput, RequestExpired
from outlast.store.requests import Requests
from outlast.worker.control import Suspended
from outlast.worker.scope import RunScope

log = structlog.get_logger("outlast.run")


@dataclass(frozen=True)
class Question:
    """A request as stored: name, payload (scrubbed of the run's secrets), the response type's
    JSON schema and validator, who may answer, and its expiry."""

    name: str
    payload: Any
    schema: dict[str, Any]
    adapter: TypeAdapter[Any]
    responders: list[str]
    expires_in: float | None

    def row(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "payload": self.payload,
            "response_schema": self.schema,
            "responders": self.responders,
            "expires_in": self.expires_in,
        }


class RunRequests:
    """The run's typed requests."""

    def __init__(
        self, scope: RunScope, *, requests: Requests, settled: Callable[[], Awaitable[None]]
    ) -> None:
        self.run_id = scope.run_id
        self.max_payload = scope.max_payload
        # what every durable wait of the run uses (``first.First`` too)
        self.requests, self.control, self.writes = requests, scope.control, scope.writes
        self.replayer, self.settled = scope.replayer, settled
        self._secrets = scope.secrets

    async def request(
        self,
        op_id: str,
        name: str,
        payload: Any,
        response: Any,
        responders: list[str],
        expires_in: float | None,
    ) -> Any:
        """Publish the request with the run's wait; its answer, as an instance of ``response``."""
        q = await self.ask(op_id, name, payload, response, responders, expires_in)
        answered = self.replayer.entry(op_id, "response")
        if answered is None:
            data = await self.outcome(op_id)
            if data is None:
                await self.settled()  # as in sleep: parallel calls journal their results first
                await self.replayer.go_live(op_id, lambda: f"the answer to request {op_id} ({name})")
                waiting = self.requests.await_request(self.run_id, self.control.token, op_id, **q.row())
                if not await self.control.db(self.writes.fenced("wait", waiting)):
                    raise Fenced(self.run_id, self.control.token)
                log.info(
                    "request.awaited",
                    run_id=self.run_id,
                    fencing_token=self.control.token,
                    operation_id=op_id,
                    name=name,
                )
                raise Suspended()
            answered = await self.replayer.append("response", op_id, data)
        return self.answer(op_id, q, answered.data)

    async def ask(
        self,
        op_id: str,
        name: str,
        payload: Any,
        response: Any,
        responders: list[str],
        expires_in: float | None,
    ) -> Question:
        """The request, journaled once (a ``request`` entry; a replay checks it asks the same)."""
        shown: Any = self._secrets.scrub(jsonable(payload, self.max_payload))
        phash = args_hash({"payload": shown})
        try:
            adapter = adapter_of(response)
        except TypeError:  # a type that cannot be a cache key (unhashable metadata)
            adapter = TypeAdapter(response)
        self.replayer.enter(op_id)
        if self.replayer.journaled(op_id):
            asked = self.replayer.entry(op_id, "request")
            if asked is None or (asked.data["name"], asked.data["payload_hash"]) != (name, phash):
                raise self.replayer.mismatch(op_id, f"request {name}", phash)
            schema = asked.data["response_schema"]
        else:
            await self.replayer.go_live(op_id, lambda: f"request {name}")
            schema = schema_of(adapter, self.run_id, name)
            asking = {
                "name": name,
                "payload": shown,
                "payload_hash": phash,
                "response_schema": schema,
                "responders": responders,
                "expires_in": expires_in,
            }
            await self.replayer.append("request", op_id, asking)
        return Question(name, shown, schema, adapter, responders, expires_in)

    async def outcome(self, op_id: str) -> dict[str, Any] | None:
        """The answer as the journal keeps it, once answered (or ``expired``); None while pending."""
        row = await self.control.db(self.requests.request(self.run_id, op_id))
        if row is not None and row["status"] == "answered":
            return {
                "value": row["answer"],
                "by": row["answered_by"],
                "who": row["answered_by_detail"],
                "at": row["answered_at"].isoformat(),
            }
        if row is not None and row["expired"]:
            return {"expired": True}
        return None

    def answer(self, op_id: str, q: Question, data: dict[str, Any]) -> Any:
        """The journaled answer as an instance of the response type; ``RequestExpired`` if none came."""
        if data.get("expired"):
            raise RequestExpired(f"run '{self.run_id}': request {op_id} ({q.name}) expired unanswered")
        try:
            return q.adapter.validate_python(data["value"])
        except ValidationError as exc:
            first = exc.errors()[0]
            raise InvalidInput(
                f"run '{self.run_id}': the answer to request {op_id} ({q.name}) does not validate: "
                f"{first['msg']} at {first['loc']}; the type has a rule its JSON schema does not say"
            ) from None


@functools.lru_cache(maxsize=256)
def adapter_of(response: Any) -> TypeAdapter[Any]:
    """The response type's validator, made once per type (a TypeAdapter costs milliseconds)."""
    return TypeAdapter(response)


def schema_of(adapter: TypeAdapter[Any], run_id: str, name: str) -> dict[str, Any]:
    """The response type's JSON schema, stored with the request: whoever answers is checked by it."""
    try:
        return adapter.json_schema()
    except PydanticUserError as exc:
        raise InvalidInput(
            f"run '{run_id}': request {name}: the response type has no JSON schema ({exc}); "
            "use a pydantic model or a type pydantic can describe"
        ) from None
