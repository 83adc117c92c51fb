"""Durable waits: timers, approvals and typed requests. No worker is held while a run waits: the wait is
committed with the lease given up, the workflow unwinds (``Suspended``), and whichever worker is
up takes the run again when it is woken (a due timer, a decision, an expiry).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any

import structlog
from pydantic import PydanticUserError, TypeAdapter, ValidationError

from outlast.errors import ApprovalExpired, ApprovalRejected, Fenced, InvalidInput, RequestExpired
from outlast.journal import args_hash, jsonable
from outlast.model import Decision
from outlast.secrets import Secrets
from outlast.store import Store
from outlast.worker.control import RunControl, Suspended
from outlast.worker.replayer import Replayer, describe
from outlast.worker.writes import JournalWrites

log = structlog.get_logger("outlast.run")
# What an approval is bound to; ``authenticated`` is journaled only when true (an entry without it
# was not).
_BOUND = ("action", "args_hash", "approvers", "policy_version", "authenticated")


class Waits:
    """The run's timers, approval requests and typed requests."""

    def __init__(
        self,
        *,
        store: Store,
        control: RunControl,
        writes: JournalWrites,
        replayer: Replayer,
        settled: Callable[[], Awaitable[None]],
        secrets: Secrets,
        max_payload: int | None = None,
    ) -> None:
        self.run_id = control.run_id
        self.max_payload = max_payload  # the largest approval arguments stored
        self._store = store
        self._control = control
        self._writes = writes
        self._replayer = replayer
        self._settled = settled  # calls made in parallel journal their results before a wait
        self._secrets = secrets

    async def sleep(self, op_id: str, seconds: float = 0.0, until: datetime | None = None) -> None:
        self._replayer.enter(op_id)
        now = await self._control.db(self._store.db_now())
        if self._replayer.journaled(op_id):
            e = self._replayer.entry(op_id, "timer")
            if e is None:
                raise self._replayer.mismatch(op_id, "sleep()")
            due = datetime.fromisoformat(e.data["until"])
        else:
            await self._replayer.go_live(op_id, lambda: "sleep()")
            due = until if until is not None else now + timedelta(seconds=seconds)
            await self._replayer.append("timer", op_id, {"until": due.isoformat()})
        if due <= now:
            return
        await self._settled()  # calls made in parallel journal their results before the run lets go
        await self._replayer.go_live(op_id, lambda: f"sleep() until {due}")
        waiting = self._store.wait(self.run_id, self._control.token, "timer", f"sleeping until {due}", due)
        if not await self._control.db(self._writes.fenced("wait", waiting)):
            raise Fenced(self.run_id, self._control.token)
        raise Suspended(due)

    async def approval(
        self,
        op_id: str,
        action: str,
        args: dict[str, Any],
        approvers: list[str],
        expires_in: float | None,
        policy_version: str,
        authenticated: bool = False,
    ) -> Decision:
        real: dict[str, Any] = jsonable(args, self.max_payload)
        # An action that is a tool with secret arguments is shown, stored and hashed with them
        # sealed (and any secret value the run knows scrubbed): the hash the approver confirms
        # still binds their values.
        clean = self._secrets.scrub(self._secrets.seal(action, real))
        ahash = args_hash(clean)
        self._replayer.enter(op_id)
        if self._replayer.journaled(op_id):
            asked = self._replayer.entry(op_id, "approval")
            bound = (action, ahash, approvers, policy_version, authenticated)
            if asked is None or tuple(asked.data.get(k, False) for k in _BOUND) != bound:
                raise self._replayer.mismatch(op_id, f"approval of {describe(action, clean)}", ahash)
        else:
            await self._replayer.go_live(op_id, lambda: f"approval of {describe(action, clean)}")
            asking: dict[str, Any] = {
                "action": action,
                "args": clean,
                "args_hash": ahash,
                "approvers": approvers,
                "expires_in": expires_in,
                "policy_version": policy_version,
            }
            if authenticated:
                asking["authenticated"] = True
            await self._replayer.append("approval", op_id, asking)
        decided = self._replayer.entry(op_id, "decision")
        if decided is None:
            row = await self._control.db(self._store.approval(self.run_id, op_id))
            if row is not None and row["status"] != "pending":
                decided = await self._replayer.append(
                    "decision",
                    op_id,
                    {
                        "status": row["status"],
                        "by": row["decided_by"],
                        "comment": row["comment"],
                        # a revision scrubbed of the run's known secrets (a sealed one may
                        # not be retyped: approvals.check_revision)
                        "args": self._secrets.scrub(row["new_args"]) if row["status"] == "revised" else clean,
                        # who decided (principal, how authenticated, from where) and when, by
                        # the database clock; None for a decision made before they were kept
                        "who": row["decided_by_detail"],
                        "at": row["decided_at"].isoformat(),
                    },
                )
            elif row is not None and row["expired"]:
                decided = await self._replayer.append("decision", op_id, {"status": "expired"})
            else:
                await self._settled()  # as in _sleep: parallel calls journal their results first
                await self._replayer.go_live(op_id, lambda: f"the decision on approval {op_id} of {action}")
                ok = await self._control.db(
                    self._writes.fenced(
                        "wait",
                        self._store.await_approval(
                            self.run_id,
                            self._control.token,
                            op_id,
                            action=action,
                            args=clean,
                            args_hash=ahash,
                            policy_version=policy_version,
                            approvers=approvers,
                            expires_in=expires_in,
                            authenticated=authenticated,
                        ),
                    )
                )
                if not ok:
                    raise Fenced(self.run_id, self._control.token)
                log.info(  # no logger bound per run
                    "approval.awaited",
                    run_id=self.run_id,
                    fencing_token=self._control.token,
                    operation_id=op_id,
                    action=action,
                )
                raise Suspended()
        return self._decision(op_id, action, decided.data, real)

    def _decision(self, op_id: str, action: str, d: dict[str, Any], real: dict[str, Any]) -> Decision:
        status = d["status"]
        if status == "expired":
            raise ApprovalExpired(f"run '{self.run_id}': approval {op_id} of {action} expired undecided")
        if status == "rejected":
            raise ApprovalRejected(
                f"run '{self.run_id}': {d['by']} rejected {action} ({op_id}): {d['comment']}"
            )
        # The workflow gets the secret values back (from its own call, never from storage).
        return Decision(op_id, status, d["by"], d["comment"], self._secrets.unseal(action, d["args"], real))

    async def request(
        self,
        op_id: str,
        name: str,
        payload: Any,
        response: Any,
        responders: list[str],
        expires_in: float | None,
    ) -> Any:
        """Publish a typed request with the run's wait and return its answer as an instance of
        ``response``: journaled (``request``, then ``response``), the same on every replay."""
        shown: Any = self._secrets.scrub(jsonable(payload, self.max_payload))
        phash = args_hash({"payload": shown})
        try:
            adapter = adapter_of(response)
        except TypeError:  # a type that cannot be a cache key (unhashable metadata)
            adapter = TypeAdapter(response)
        self._replayer.enter(op_id)
        if self._replayer.journaled(op_id):
            asked = self._replayer.entry(op_id, "request")
            if asked is None or (asked.data["name"], asked.data["payload_hash"]) != (name, phash):
                raise self._replayer.mismatch(op_id, f"request {name}", phash)
            schema = asked.data["response_schema"]
        else:
            await self._replayer.go_live(op_id, lambda: f"request {name}")
            schema = schema_of(adapter, self.run_id, name)
            await self._replayer.append(
                "request",
                op_id,
                {
                    "name": name,
                    "payload": shown,
                    "payload_hash": phash,
                    "response_schema": schema,
                    "responders": responders,
                    "expires_in": expires_in,
                },
            )
        answered = self._replayer.entry(op_id, "response")
        if answered is None:
            row = await self._control.db(self._store.request(self.run_id, op_id))
            if row is not None and row["status"] == "answered":
                answered = await self._replayer.append(
                    "response",
                    op_id,
                    {
                        "value": row["answer"],
                        "by": row["answered_by"],
                        "who": row["answered_by_detail"],
                        "at": row["answered_at"].isoformat(),
                    },
                )
            elif row is not None and row["expired"]:
                answered = await self._replayer.append("response", op_id, {"expired": True})
            else:
                await self._settled()  # as in sleep: parallel calls journal their results first
                await self._replayer.go_live(op_id, lambda: f"the answer to request {op_id} ({name})")
                waiting = self._store.await_request(
                    self.run_id,
                    self._control.token,
                    op_id,
                    name=name,
                    payload=shown,
                    response_schema=schema,
                    responders=responders,
                    expires_in=expires_in,
                )
                if not await self._control.db(self._writes.fenced("wait", waiting)):
                    raise Fenced(self.run_id, self._control.token)
                log.info(
                    "request.awaited",
                    run_id=self.run_id,
                    fencing_token=self._control.token,
                    operation_id=op_id,
                    name=name,
                )
                raise Suspended()
        if answered.data.get("expired"):
            raise RequestExpired(f"run '{self.run_id}': request {op_id} ({name}) expired unanswered")
        try:
            return adapter.validate_python(answered.data["value"])
        except ValidationError as exc:
            first = exc.errors()[0]
            raise InvalidInput(
                f"run '{self.run_id}': the answer to request {op_id} ({name}) is not a {response}: "
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
