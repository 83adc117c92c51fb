"""This module keeps the worker's hold on one claimed run, and the signals that unwind a workflow.

``RunControl`` is made by the worker at the claim and passed down to every part of the engine:
the fencing token (held here only), the lease (proven until when), and what the worker or the
world asks of the run — stop (hand over at the next crossing), cancel (someone asked), pause (an
operator's: stop at the next crossing and wait), lost (another worker owns it now) — and the sync
tool calls a cancellation may abandon. Nothing in the engine reaches back up into the worker.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from outlast.errors import ServiceUnavailable

if TYPE_CHECKING:
    from outlast.worker.linger import Linger

T = TypeVar("T")


class Suspended(BaseException):
    """A durable wait is committed: unwind the workflow; the worker is free."""

    def __init__(self, wake_at: datetime | None = None) -> None:
        super().__init__("suspended")
        self.wake_at = wake_at


class CarriedForward(BaseException):
    """``run.carry_forward`` was reached live: unwind the workflow; the executor ends this
    generation of the run's journal and starts the next with ``input``, its operations numbered
    on from ``op_base``. A BaseException, so that a workflow's ``except Exception`` cannot
    swallow it."""

    def __init__(self, input: dict[str, Any], op_base: int) -> None:
        super().__init__("carried forward")
        self.input = input
        self.op_base = op_base


class Interrupted(BaseException):
    """The run cannot go on here now (Postgres did not take its writes within the bound, or its
    lease could not be proven before a dispatch): it is left, with no verdict, to be taken up
    again. A BaseException, so that a workflow's ``except Exception`` cannot swallow it."""


class Abandoned(BaseException):
    """Raised where a sync tool's call is awaited when its run's cancellation outlived its grace:
    the call is given up on (its thread goes on; its late result is refused). A BaseException, so
    that no ``Retry`` takes it for a failure to try again."""


class SyncCalls:
    """``SyncCalls`` tracks the sync tool calls with no ``timeout=`` that one run's operations await
    now (a hung one would hold the run for ever). ``abandon`` fails every one still awaited with
    ``Abandoned``; none starts after it."""

    def __init__(self, *, run_id: str) -> None:
        self.run_id = run_id
        self.abandoned = False  # no call starts from now on
        self._calls: set[asyncio.Future[Any]] = set()

    def check(self) -> None:
        """Before a sync call starts (a retry): none starts once the calls were abandoned."""
        if self.abandoned:
            raise Abandoned(f"run '{self.run_id}': cancelled while the tool ran, past its grace")

    def add(self, call: asyncio.Future[Any]) -> None:
        self._calls.add(call)

    def discard(self, call: asyncio.Future[Any]) -> None:
        self._calls.discard(call)

    def abandon(self) -> None:
        self.abandoned = True
        for call in list(self._calls):
            self._give_up(call)

    def _give_up(self, call: asyncio.Future[Any]) -> None:
        if not call.done():
            call.set_exception(
                Abandoned(f"run '{self.run_id}': cancelled while the tool ran, past its grace")
            )


class HandOver(BaseException):
    """Raised at a crossing when the worker is shutting down: the run goes to another worker.
    A BaseException, so that a workflow's ``except Exception`` does not swallow it."""


class Paused(BaseException):
    """Raised at a crossing when an operator's pause holds the run (``outlast pause``): the workflow
    unwinds, the calls under way settle and are journaled, and the run waits, reason ``paused``,
    holding no worker (``pausing.py``). A BaseException, so that a workflow's ``except Exception``
    cannot swallow it."""


class JournalEnd(BaseException):
    """``JournalEnd`` is raised in offline replay only (``outlast._replay``): the workflow reached a
    crossing the journal does not settle, where a worker would go live (``asks``: what the code asks
    there). Nothing past it runs: no tool, no write. A BaseException, so that a workflow's
    ``except Exception`` cannot swallow it."""

    def __init__(self, op_id: str | None, asks: str) -> None:
        super().__init__(f"journal end at {op_id}: the code asks {asks}")
        self.op_id = op_id
        self.asks = asks


class Flag:
    """A signal that is looked at, never awaited: ``asyncio.Event``'s ``set``/``is_set`` without
    its waiters' queue (an Event costs ~0.85 KB; three a held run)."""

    __slots__ = ("_set",)

    def __init__(self) -> None:
        self._set = False

    def set(self) -> None:
        self._set = True

    def is_set(self) -> bool:
        return self._set


class RunControl:
    """``RunControl`` holds one claimed run's token, lease and signals."""

    def __init__(
        self,
        *,
        run_id: str,
        token: int,
        ttl: float | None = None,
        sent_at: float | None = None,
        cancel: bool = False,
        offline: bool = False,
        linger: Linger | None = None,
    ) -> None:
        self.run_id = run_id
        self.linger = linger  # the worker's lingering receives (None: a receive waits at once)
        self.offline = offline  # an offline replay: the run never goes live (``JournalEnd``)
        self.token = token
        self.ttl = ttl  # None: no lease to prove (tests that run an execution by hand)
        self.until = sent_at + ttl if ttl is not None and sent_at is not None else math.inf
        self.stop = Flag()  # hand over at the next crossing
        self.cancel = Flag()  # a cancellation was requested
        self.lost = Flag()  # a newer fencing token exists
        self.pause = Flag()  # an operator's pause holds the run: it stops at its next crossing
        if cancel:
            self.cancel.set()
        self.dispatch_stopped = False  # the run was left (fenced, interrupted, handed over): dispatch no more
        self.dispatching = 0  # tools in flight: a hand-over lets them finish
        self.sync_calls = SyncCalls(run_id=run_id)  # abandoned one heartbeat after a cancellation is seen
        self._grace: asyncio.TimerHandle | None = None

    def cancelled(self) -> None:
        """A cancellation was requested: the run ends at its next crossing. The sync calls it
        awaits get a grace of one heartbeat (TTL/3) to return (their results are journaled);
        those still running then are abandoned (a hung one would hold the run for ever)."""
        self.cancel.set()
        if self._grace is None and self.ttl is not None:
            self._grace = asyncio.get_running_loop().call_later(self.ttl / 3, self.sync_calls.abandon)

    def leaving(self) -> bool:
        """The run is to stop here: the worker hands it over, it is cancelled, or it is lost."""
        return self.stop.is_set() or self.cancel.is_set() or self.lost.is_set()

    def proven(self, sent_at: float) -> None:
        """A claim or renewal sent at ``sent_at`` (monotonic) was granted: proven until
        ``sent_at + ttl`` (from the sending, not the answer: on the safe side)."""
        if self.ttl is not None:
            self.until = max(self.until, sent_at + self.ttl)

    def remaining(self) -> float:
        return self.until - time.monotonic()

    def check_stop(self) -> None:
        """At every crossing: a worker shutting down hands the run over here; a paused run stops
        here (not while it is cancelled: its cancellation goes first)."""
        if self.stop.is_set():
            raise HandOver()
        if self.pause.is_set() and not self.cancel.is_set():
            raise Paused()

    def leave(self, why: str) -> Interrupted:
        """Mark the run left by this worker and say why, as the exception to raise."""
        self.dispatch_stopped = True
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
        if self.dispatch_stopped:
            raise self.leave(f"left by this worker; {what} not dispatched")
        if self.ttl is None:
            return
        give_up = time.monotonic() + self.ttl
        while self.remaining() < self.ttl / 3:
            if time.monotonic() > give_up or self.lost.is_set():
                raise self.leave(f"lease not proven before dispatching {what}; left for another worker")
            await asyncio.sleep(0.05)
