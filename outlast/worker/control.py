"""The worker's hold on one claimed run, and the signals that unwind a workflow.

``RunControl`` is made by the worker at the claim and passed down to every part of the engine:
the fencing token (held here only), the lease (proven until when), and what the worker or the
world asks of the run — stop (hand over at the next crossing), cancel (someone asked), lost
(another worker owns it now). Nothing in the engine reaches back up into the worker.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable
from datetime import datetime
from typing import TypeVar

from outlast.errors import ServiceUnavailable

T = TypeVar("T")


class Suspended(BaseException):
    """A durable wait is committed: unwind the workflow; the worker is free."""

    def __init__(self, wake_at: datetime | None = None) -> None:
        super().__init__("suspended")
        self.wake_at = wake_at


class Interrupted(BaseException):
    """The run cannot go on here now (Postgres did not take its writes within the bound, or its
    lease could not be proven before a dispatch): it is left, with no verdict, to be taken up
    again. A BaseException, so that a workflow's ``except Exception`` cannot swallow it."""


class HandOver(BaseException):
    """Raised at a crossing when the worker is shutting down: the run goes to another worker.
    A BaseException, so that a workflow's ``except Exception`` does not swallow it."""


class JournalEnd(BaseException):
    """Offline replay only (``outlast.replay``): the workflow reached a crossing the journal does
    not settle, where a worker would go live (``asks``: what the code asks there). Nothing past it
    runs: no tool, no write. A BaseException, so that a workflow's ``except Exception`` cannot
    swallow it."""

    def __init__(self, op_id: str | None, asks: str) -> None:
        super().__init__(f"journal end at {op_id}: the code asks {asks}")
        self.op_id = op_id
        self.asks = asks


class RunControl:
    """One claimed run's token, lease and signals."""

    def __init__(
        self,
        run_id: str,
        token: int,
        ttl: float | None = None,
        sent_at: float | None = None,
        cancel: bool = False,
        offline: bool = False,
    ) -> None:
        self.run_id = run_id
        self.offline = offline  # an offline replay: the run never goes live (``JournalEnd``)
        self.token = token
        self.ttl = ttl  # None: no lease to prove (tests that run an execution by hand)
        self.until = sent_at + ttl if ttl is not None and sent_at is not None else math.inf
        self.stop = asyncio.Event()  # hand over at the next crossing
        self.cancel = asyncio.Event()  # a cancellation was requested
        self.lost = asyncio.Event()  # a newer fencing token exists
        if cancel:
            self.cancel.set()
        self.left = False  # the run was left (fenced, interrupted, handed over): dispatch no more
        self.dispatching = 0  # tools in flight: a hand-over lets them finish

    def proven(self, sent_at: float) -> None:
        """A claim or renewal sent at ``sent_at`` (monotonic) was granted: proven until
        ``sent_at + ttl`` (from the sending, not the answer: on the safe side)."""
        if self.ttl is not None:
            self.until = max(self.until, sent_at + self.ttl)

    def remaining(self) -> float:
        return self.until - time.monotonic()

    def check_stop(self) -> None:
        """At every crossing: a worker shutting down hands the run over here."""
        if self.stop.is_set():
            raise HandOver()

    def leave(self, why: str) -> Interrupted:
        """Mark the run left by this worker and say why, as the exception to raise."""
        self.left = True
        return Interrupted(f"run '{self.run_id}': {why}")

    async def db(self, pending: Awaitable[T]) -> T:
        """Await a store call made for the run: Postgres out of reach past the writer's bound
        leaves the run (``Interrupted``), never fails it."""
        try:
            return await pending
        except ServiceUnavailable as exc:
            raise self.leave(str(exc)) from exc

    async def lease_proven(self, what: str) -> None:
        """Dispatch only with a lease proven for at least a third of its TTL more (a heartbeat
        was missed otherwise: this worker may be paused, or its link slow); wait up to one TTL
        for a renewal, else leave the run. This narrows, and cannot close, the window in which
        a paused worker's effect lands after another owner took over (README: guarantees)."""
        if self.left:
            raise self.leave(f"left by this worker; {what} not dispatched")
        if self.ttl is None:
            return
        give_up = time.monotonic() + self.ttl
        while self.remaining() < self.ttl / 3:
            if time.monotonic() > give_up or self.lost.is_set():
                raise self.leave(f"lease not proven before dispatching {what}; left for another worker")
            await asyncio.sleep(0.05)
