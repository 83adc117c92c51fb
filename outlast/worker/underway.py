"""This module tracks what of one run is under way: its tool calls (parallel ones included), and its
timers and approvals (pauses). The run waits for its calls before it ends or lets go of its worker;
a tool call waiting long for a slot or a rate may park the run only when it is ``may_park``."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from outlast.worker.children import RunChildren


class UnderWay:
    """``UnderWay`` tracks the crossings of one run under way: tool calls (parallel ones included),
    and timers and approvals (pauses)."""

    __slots__ = ("_quiet", "calls", "pauses")

    def __init__(self) -> None:
        self.calls = 0
        self.pauses = 0
        # Set when the calls under way are over; made by settled() only when it has to wait.
        self._quiet: asyncio.Event | None = None

    def call_ended(self) -> None:
        self.calls -= 1
        if self.calls == 0 and self._quiet is not None:
            self._quiet.set()

    async def settled(self) -> None:
        """Wait for the calls still under way: a parallel call can outlive the workflow's own
        await (the siblings of a ``gather`` that raised go on), and the run must not end before
        their results are journaled. Looked at again after each wake-up: a branch of a ``gather``
        may start its next call at once, before this waiter runs."""
        while self.calls:
            if self._quiet is None or self._quiet.is_set():  # set by calls that ended before
                self._quiet = asyncio.Event()
            await self._quiet.wait()


def may_park(under_way: UnderWay, children: RunChildren) -> bool:
    """A tool call waiting long for a slot or a rate may park the run only when no other
    crossing of it is under way: a parallel call goes on in the worker, and a timer, an approval
    or a wait for a child commits the run's wait itself once the calls have settled."""
    return under_way.calls == 1 and under_way.pauses == 0 and children.waiting == 0
