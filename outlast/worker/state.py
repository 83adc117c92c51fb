"""This module holds what the worker's parts share: who the worker is, the runs it holds, the
entries it read past its room, and its stop. ``Intake``, ``Claims`` and ``Heartbeat`` are each given
this and the few callables they use of one another, never the ``Worker`` that composes them."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from outlast.queue import Delivery
from outlast.worker.executor import Execution


@dataclass
class Active:
    """A run this worker holds: its delivery and what executes it (``execution.control`` is the
    hold itself: the token, the lease, and the stop, cancel and lost signals)."""

    delivery: Delivery
    execution: Execution
    task: asyncio.Task[None] | None = None


@dataclass(eq=False)
class WorkerState:
    """``WorkerState`` is the worker's shared state: its name (set when it starts), queues and
    programs, the runs it holds, the tasks serving entries, the entries read past its room, and its
    stop."""

    queues: list[str]
    programs: dict[str, str]
    name: str = ""
    active: dict[str, Active] = field(default_factory=dict)
    tasks: set[asyncio.Task[None]] = field(default_factory=set)  # one per entry being served
    read_ahead: list[Delivery] = field(default_factory=list)  # read past the room, started first
    stopping: asyncio.Event = field(default_factory=asyncio.Event)
