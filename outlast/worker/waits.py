"""Durable waits are timers and approvals (typed requests: ``requests.py``). No worker is held while a
run waits: the wait is committed with the lease given up, the workflow unwinds (``Suspended``), and
whichever worker is up takes the run again when it is woken (a due timer, a decision, an expiry)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import structlog

from outlast._journal import args_hash, jsonable
from outlast._model import Decision, incarnation
from outlast.errors import ApprovalExpired, ApprovalRejected, Fenced
from outlast.store.approvals import Approvals
from outlast.store.leases import Leases
from outlast.store.messages import Messages
from outlast.store.sweeps import Sweeps
from outlast.worker.control import Suspended
from outlast.worker.replayer import describe
from outlast.worker.scope import RunScope

log = structlog.get_logger("outlast.run")
# What an approval is bound to; ``authenticated`` is journaled only when true (an entry without it
# was not).
_BOUND = ("action", "args_hash", "approvers", "policy_version", "authenticated")


@dataclass(frozen=True)
class Asked:
    """An approval request as stored: its arguments sealed and scrubbed (``clean``) and their
    hash; ``real``, the workflow's own values, given back with the decision."""

    action: str
    clean: dict[str, Any]
    args_hash: str
    approvers: list[str]
    expires_in: float | None
    policy_version: str
    authenticated: bool
    real: dict[str, Any]

    def row(self) -> dict[str, Any]:
        """The store's arguments for the request."""
        return {
            "action": self.action,
            "args": self.clean,
            "args_hash": self.args_hash,
            "policy_version": self.policy_version,
            "approvers": self.approvers,
            "expires_in": self.expires_in,
            "authenticated": self.authenticated,
        }


class Waits:
    """``Waits`` keeps the run's timers and approval requests."""

    def __init__(
        self,
        scope: RunScope,
        *,
        leases: Leases,
        sweeps: Sweeps,
        approvals: Approvals,
        messages: Messages,
        settled: Callable[[], Awaitable[None]],
        channels: dict[str, Any] | None = None,
    ) -> None:
        self.run_id = scope.run_id
        self.born = incarnation(scope.record.created_at)  # which its callback tokens bind: inbox.py
        self._channels = channels  # the workflow's declared message channels (None: any): inbox.py
        self._callbacks = scope.callbacks  # (OUTLAST_SECRET_KEY, OUTLAST_CALLBACK_URL): inbox.py
        self._taking = asyncio.Lock()  # one look-and-take at a time (parallel receives): inbox.py
        self.max_payload = scope.max_payload  # the largest approval arguments stored
        self._leases, self._sweeps = leases, sweeps
        self._approvals, self._messages = approvals, messages  # messages: inbox.py
        self._control = scope.control
        self._writes = scope.writes
        self._replayer = scope.replayer
        self._settled = settled  # calls made in parallel journal their results before a wait
        self._secrets = scope.secrets

    async def sleep(self, op_id: str, seconds: float = 0.0, until: datetime | None = None) -> None:
        due, now = await self.due(op_id, seconds, until)
        if due <= now:
            return
        await self._settled()  # calls made in parallel journal their results before the run lets go
        await self._replayer.go_live(op_id, lambda: f"sleep() until {due}")
        waiting = self._leases.wait(self.run_id, self._control.token, "timer", f"sleeping until {due}", due)
        if not await self._control.db(self._writes.fenced("wait", waiting)):
            raise Fenced(self.run_id, self._control.token)
        raise Suspended(due)

    async def due(
        self, op_id: str, seconds: float = 0.0, until: datetime | None = None
    ) -> tuple[datetime, datetime]:
        """The timer's due time, journaled once (a ``timer`` entry; a replay reads it), and now
        by the database clock."""
        self._replayer.enter(op_id)
        now = await self._control.db(self._sweeps.db_now())
        if self._replayer.journaled(op_id):
            e = self._replayer.entry(op_id, "timer")
            if e is None:
                raise self._replayer.mismatch(op_id, "sleep()")
            return datetime.fromisoformat(e.data["until"]), now
        await self._replayer.go_live(op_id, lambda: "sleep()")
        due = until if until is not None else now + timedelta(seconds=seconds)
        await self._replayer.append("timer", op_id, {"until": due.isoformat()})
        return due, now

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
        asked = await self.ask_approval(
            op_id, action, args, approvers, expires_in, policy_version, authenticated
        )
        decided = self._replayer.entry(op_id, "decision")
        if decided is None:
            data = await self.approval_outcome(op_id, asked.clean)
            if data is not None:
                decided = await self._replayer.append("decision", op_id, data)
            else:
                await self._settled()  # as in sleep: parallel calls journal their results first
                await self._replayer.go_live(op_id, lambda: f"the decision on approval {op_id} of {action}")
                ok = await self._control.db(
                    self._writes.fenced(
                        "wait",
                        self._approvals.await_approval(
                            self.run_id, self._control.token, op_id, **asked.row()
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
        return self.decision(op_id, action, decided.data, asked.real)

    async def ask_approval(
        self,
        op_id: str,
        action: str,
        args: dict[str, Any],
        approvers: list[str],
        expires_in: float | None,
        policy_version: str,
        authenticated: bool = False,
    ) -> Asked:
        """The approval request, journaled once (an ``approval`` entry; a replay checks it is the
        same action and arguments)."""
        real: dict[str, Any] = jsonable(args, self.max_payload)
        # An action that is a tool with secret arguments is shown, stored and hashed with them
        # sealed (and any secret value the run knows scrubbed): the hash the approver confirms
        # still binds their values.
        clean = self._secrets.scrub(self._secrets.seal(action, real))
        ahash = args_hash(clean)
        asked = Asked(action, clean, ahash, approvers, expires_in, policy_version, authenticated, real)
        self._replayer.enter(op_id)
        if self._replayer.journaled(op_id):
            e = self._replayer.entry(op_id, "approval")
            bound = (action, ahash, approvers, policy_version, authenticated)
            if e is None or tuple(e.data.get(k, False) for k in _BOUND) != bound:
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
        return asked

    async def approval_outcome(self, op_id: str, clean: dict[str, Any]) -> dict[str, Any] | None:
        """The decision on the request as the journal keeps it, once decided or expired; None
        while it is pending."""
        row = await self._control.db(self._approvals.approval(self.run_id, op_id))
        if row is not None and row["status"] != "pending":
            return {
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
            }
        if row is not None and row["expired"]:
            return {"status": "expired"}
        return None

    def decision(self, op_id: str, action: str, d: dict[str, Any], real: dict[str, Any]) -> Decision:
        status = d["status"]
        if status == "expired":
            raise ApprovalExpired(f"run '{self.run_id}': approval {op_id} of {action} expired undecided")
        if status == "rejected":
            raise ApprovalRejected(
                f"run '{self.run_id}': {d['by']} rejected {action} ({op_id}): {d['comment']}"
            )
        # The workflow gets the secret values back (from its own call, never from storage).
        return Decision(op_id, status, d["by"], d["comment"], self._secrets.unseal(action, d["args"], real))
