"""Flow control of one run uses concurrency slots and shared rate windows. Slots (Postgres, held
under the run's fencing token and renewed with its lease) and rate windows (Redis) are taken before
an operation's intention, never between its intention and its result; a tool's slot is given back
after its result.

A slot or room in a rate window is waited for briefly in the worker (the run's deadline,
cancellation and hand-over checked between tries; ``outlast status`` shows the wait); past
``SLOT_WAIT`` the run is parked (``waiting``, reason ``concurrency_slot`` or ``rate_limit``, with
a wake time) and holds no worker — at a tool call, only when no other crossing of the run is under
way (a sibling call of a ``gather`` waits in the worker; a sibling timer, approval or wait for a
child commits the run's wait itself once the calls have settled).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any

import structlog

from outlast.app import Tool, Workflow
from outlast.errors import ConfigError, Fenced, ServiceUnavailable
from outlast.queue import RateWindows
from outlast.store.flow import Flow
from outlast.store.runs import Runs
from outlast.store.sweeps import Sweeps
from outlast.worker.control import RunControl, Suspended
from outlast.worker.writes import JournalWrites

log = structlog.get_logger("outlast.run")

SLOT_POLL = 0.1  # seconds between tries for a slot, waiting in the worker
SLOT_WAIT = 1.0  # seconds a workflow slot is waited for in the worker before the run is parked
SLOT_RETRY = 3.0  # a run parked for a slot tries again after about this long, if no release woke it
LONGEST_NAP = 1.0  # the longest sleep between two looks at the run's deadline and signals

Check = Callable[[], Awaitable[None]]
MayPark = Callable[[], bool]  # no other crossing of the run is under way: it may be parked


def _never() -> bool:
    return False


_FREE: contextlib.AbstractAsyncContextManager[None] = contextlib.nullcontext()


def workflow_key(wf: Workflow, run_input: dict[str, Any], tenant: str | None) -> str:
    """The capped key of a run: its workflow, and its concurrency key's value (of the run's input
    and tenant) when declared."""
    if wf.concurrency_key is None:
        return f"workflow:{wf.name}"
    return f"workflow:{wf.name}:{wf.concurrency_key(run_input, tenant)}"


class FlowGate:
    """``FlowGate`` takes one claimed run's slots and rate admissions."""

    def __init__(
        self,
        *,
        flow: Flow,
        runs: Runs,
        sweeps: Sweeps,
        windows: RateWindows | None,
        control: RunControl,
        writes: JournalWrites,
    ) -> None:
        self._flow, self._runs, self._sweeps = flow, runs, sweeps
        self._windows = windows
        self._control = control
        self._writes = writes  # its slot and park writes go behind the run's held entries
        self._ttl = control.ttl or 30.0  # a run executed by hand has no lease: its slots outlive it a while
        self._members: dict[str, str] = {}  # op id -> its admission in the rate windows
        self._admissions = 0
        self.holds = False  # a slot was taken in this execution: released at its end

    async def _acquire(self, key: str, cap: int, holder: str = "") -> bool:
        self.holds = True
        c = self._control
        slot = await c.db(
            self._writes.fenced(
                "slot", self._flow.acquire_slot(key, cap, c.run_id, c.token, self._ttl, holder)
            )
        )
        return slot is not None

    async def workflow_slot(self, key: str, cap: int) -> bool:
        """Take a slot of the run's capped ``key``, waiting up to ``SLOT_WAIT``: False when
        every slot is still taken."""
        give_up = time.monotonic() + SLOT_WAIT
        while not await self._acquire(key, cap):
            if time.monotonic() >= give_up:
                return False
            await asyncio.sleep(SLOT_POLL * random.uniform(0.5, 1.5))
        return True

    async def release(self) -> None:
        """Give back every slot this execution holds (the run ended, waits or was handed over);
        one left behind (Postgres out of reach) frees itself when its lease would have ended."""
        if self.holds:
            with contextlib.suppress(ServiceUnavailable):
                await self._flow.release_slots(self._control.run_id, self._control.token)

    def operation(
        self, tool: Tool, op_id: str, check: Check, may_park: MayPark = _never
    ) -> contextlib.AbstractAsyncContextManager[None]:
        """Around one dispatch: a slot of the tool and room in its rate windows first (``check``
        between tries: the run's deadline and cancellation), the slot given back at the end.
        ``may_park()`` true (no other crossing of the run under way): a wait longer than ``SLOT_WAIT``
        parks the run instead of holding the worker (``Suspended``). A tool with neither has
        nothing around its dispatch (most tools: no generator per operation)."""
        if tool.max_concurrent is None and not tool.rates:
            return _FREE
        return self._limited(tool, op_id, check, may_park)

    @contextlib.asynccontextmanager
    async def _limited(self, tool: Tool, op_id: str, check: Check, may_park: MayPark) -> AsyncIterator[None]:
        capped = tool.max_concurrent is not None
        if capped:
            await self._wait(
                f"a slot of tool '{tool.name}' (max_concurrent={tool.max_concurrent})",
                lambda: self._slot_try(tool, op_id),
                check,
                may_park,
                f"tool:{tool.name}",
            )
        try:
            if tool.rates:
                await self.admit(tool, op_id, check, may_park)
            yield
        finally:
            if capped:
                with contextlib.suppress(ServiceUnavailable):
                    await self._flow.release_slots(self._control.run_id, self._control.token, op_id)

    async def _slot_try(self, tool: Tool, op_id: str) -> float:
        assert tool.max_concurrent is not None
        got = await self._acquire(f"tool:{tool.name}", tool.max_concurrent, op_id)
        return 0.0 if got else SLOT_POLL * random.uniform(0.5, 1.5)

    async def admit(self, tool: Tool, op_id: str, check: Check, may_park: MayPark = _never) -> None:
        """Room for one dispatch of ``tool`` in every one of its rate windows (waited for)."""
        windows = self._windows
        if windows is None:
            raise ConfigError(f"tool '{tool.name}' has rate limits: it needs a worker with Redis")
        wants = [(r, 1.0 if r.name == "requests" else tool.cost[r.name]) for r in tool.rates]
        self._admissions += 1
        member = f"{self._control.run_id}:{op_id}:{self._control.token}:{self._admissions}"
        limits = ", ".join(f"{r.name} {r.limit:g}/{r.window:g}s" for r in tool.rates)

        async def attempt() -> float:
            return await self._control.db(windows.take(tool.name, wants, member))

        await self._wait(f"the rate of tool '{tool.name}' ({limits})", attempt, check, may_park)
        self._members[op_id] = member

    async def settle(self, tool: Tool, op_id: str, charges: dict[str, float]) -> None:
        """What the dispatch charged replaces its estimate in the rate windows."""
        member = self._members.pop(op_id, None)
        if member is None or self._windows is None:
            return
        for rate in tool.rates:
            if rate.name in charges and rate.name != "requests":
                with contextlib.suppress(ServiceUnavailable):
                    await self._windows.settle(
                        tool.name, rate.name, member, tool.cost[rate.name], charges[rate.name]
                    )

    async def back_off(self, tool: Tool, op_id: str, seconds: float) -> None:
        """The tool raised ``RateLimited``: hold every worker's dispatches of it back, wait, and be
        admitted again (a new request) before the same dispatch is tried again."""
        if self._windows is not None:
            with contextlib.suppress(ServiceUnavailable):
                await self._windows.back_off(tool.name, seconds)
        await asyncio.sleep(seconds)
        if tool.rates:
            await self.admit(tool, op_id, no_check)

    async def _wait(
        self,
        what: str,
        attempt: Callable[[], Awaitable[float]],
        check: Check,
        may_park: MayPark,
        key: str | None = None,
    ) -> None:
        """Try until ``attempt`` says done (0), sleeping as long as it says between tries; the
        first wait and its end are events of the run (``outlast status`` shows it waiting). Past
        ``SLOT_WAIT``, a run with no other crossing under way is parked instead."""
        c = self._control
        started = time.monotonic()
        waited = False
        while True:
            await check()
            c.check_stop()
            if c.lost.is_set():
                raise c.leave(f"lease lost while waiting for {what}")
            nap = await attempt()
            if nap <= 0:
                break
            if time.monotonic() - started + nap > SLOT_WAIT and may_park():
                reason = "rate_limit" if key is None else "concurrency_slot"
                wake_at = await self.park(reason, what, nap, key)
                raise Suspended(wake_at)
            if not waited:
                waited = True
                log.info("run.throttled", run_id=c.run_id, waits_for=what)
                await c.db(self._runs.event(c.run_id, "throttled", {"waits_for": what}))
            await asyncio.sleep(min(nap * random.uniform(1.0, 1.1), LONGEST_NAP))
        if waited:
            await c.db(self._runs.event(c.run_id, "unthrottled", {"waited_for": what}))

    async def park(self, reason: str, what: str, nap: float, key: str | None) -> datetime:
        """Give the worker back: the run waits (``reason``) for a slot of ``key`` (woken when one
        is released, else tried again in about ``SLOT_RETRY``) or, with no key, ``nap`` seconds
        for room in a rate window. Returns the wake time; the run goes live again at this very
        crossing (nothing of the wait is journaled)."""
        c = self._control
        seconds = (SLOT_RETRY if key is not None else max(nap, SLOT_POLL)) * random.uniform(1.0, 1.2)
        wake_at = await c.db(self._sweeps.db_now()) + timedelta(seconds=seconds)
        message = f"run '{c.run_id}': waits for {what}; tried again at {wake_at:%H:%M:%S} at the latest"
        if not await c.db(
            self._writes.fenced("park", self._flow.park(c.run_id, c.token, reason, message, wake_at, key))
        ):
            raise Fenced(c.run_id, c.token)
        log.debug("run.parked", run_id=c.run_id, reason=reason, message=message)
        return wake_at


async def no_check() -> None:
    """Nothing to check between tries: a resumed operation's intention is journaled (nothing may
    stop it before its dispatch), and a dispatch that the tool itself rate limited is admitted
    again."""
