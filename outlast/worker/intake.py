"""Intake reads the stream entries a worker takes. New entries are read from the priority levels of
its queues by weight, for the room it has; entries idle for a whole lease (their worker went
silent) are reclaimed ahead of them, in a lane of their own. Entries read past the room wait in
``read_ahead`` for the first places free, and go back to the queue when the worker stops."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import structlog

from outlast import _metrics as metrics
from outlast.queue import Delivery, Queue
from outlast.queue.streams import LEVELS
from outlast.settings import Settings
from outlast.worker.priority import Weighted
from outlast.worker.state import WorkerState

log = structlog.get_logger("outlast.worker")

# Seconds an idle pass over the queues waits at most (the stop's cancellation aside): each queue's
# read waits its share in turn, so an entry on another queue waits up to a pass. One queue: 2 s
# (an idle worker wakes less); several: 0.5 s, as long as an entry may wait on the queue after.
READ_WAIT = 2.0
PASS_WAIT = 0.5


async def _let_claims_go() -> None:
    """Two turns of the event loop: the runs just started send their claims (one turn for their
    tasks to queue the claim, one for the writer to send it) before the loop reads again. Reading
    first put a round of XREADGROUPs (~0.1-0.3 ms of CPU) ahead of every claim at light load."""
    await asyncio.sleep(0)
    await asyncio.sleep(0)


class Intake:
    """``Intake`` decides what the worker reads and reclaims, and when each entry starts being served."""

    def __init__(
        self,
        *,
        state: WorkerState,
        settings: Settings,
        queue: Queue,
        serve: Callable[[Delivery, bool], Coroutine[Any, Any, None]],
        settled: Callable[[], bool],
        ack: Callable[[Delivery], Awaitable[None]],
    ) -> None:
        self.state = state
        self.s = settings
        self.queue = queue
        self._serve = serve  # Claims.serve: the entry claimed, executed and acknowledged
        self._settled = settled  # Heartbeat.settled: Postgres has answered for a whole lease
        self._ack = ack
        self.place_freed = asyncio.Event()  # set when a run ends: a place is free
        self._levels: dict[str, Weighted] = {}  # per queue: whose turn it is among the levels
        self._quiet: set[str] = set()  # queues whose last read waited, and brought at most one entry

    def room_left(self) -> int:
        return self.s.concurrency - len(self.state.tasks)

    async def read_loop(self) -> None:
        next_reclaim, turn = 0.0, 0
        while not self.state.stopping.is_set():  # as in Worker.every: not only cancelled
            try:
                if time.monotonic() >= next_reclaim:
                    # Orphans first, even with no room: what a dead worker left goes ahead of the
                    # backlog, in a lane of their own.
                    looked = time.monotonic()  # before: Redis's idle times are read after it
                    next_reclaim = looked + await self.reclaim()
                while self.state.read_ahead and self.room_left() > 0:
                    self.start(self.state.read_ahead.pop(0))
                if self.room_left() <= 0:
                    self.place_freed.clear()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(
                            self.place_freed.wait(), max(next_reclaim - time.monotonic(), 0.01)
                        )
                    continue
                queues = self.state.queues
                for i in range(len(queues)):
                    if time.monotonic() >= next_reclaim:
                        # Many idle queues: the reclaim is due first; the next pass reads on
                        # from the queue this one did not reach, so none is left unread.
                        turn = (turn + i) % len(queues)
                        break
                    q = queues[(turn + i) % len(queues)]
                    most = READ_WAIT if len(self.state.queues) == 1 else PASS_WAIT
                    left = min(next_reclaim - time.monotonic(), most) * 1000 / len(self.state.queues)
                    started = False
                    for d in await self._read(q, max(50, int(left))):
                        if self.room_left() > 0:
                            self.start(d)
                            started = True
                        else:
                            self.state.read_ahead.append(d)
                    if started:
                        await _let_claims_go()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("queue.read_failing", error=str(exc))
                await asyncio.sleep(1)

    async def _read(self, queue: str, block: int) -> list[Delivery]:
        """Entries of the queue's priority levels for the room left: each level its weighted share
        (``priority.Weighted``; one round trip for all of them), what a level leaves unused to the
        others, highest first; with
        nothing waiting, one read that waits for any level (up to one entry a level: those past
        the room wait in ``read_ahead``, touched by the heartbeat, for the first places free).

        At light load the read that waits comes at once: when the last read was one that waited
        and brought at most one entry (one level at most had any), and the worker holds at most
        the run it gave. The reads that do not wait would mostly find nothing then, at the cost of
        a round trip (about 0.2 ms of CPU, beside the claim just sent); the read that waits
        returns at once what came since. A backlog on several levels is never read so (its
        waiting read brings more than one entry): their shares hold."""
        room = self.room_left()
        name = self.state.name
        got: list[Delivery] = []
        if queue not in self._quiet or not len(self.state.tasks) <= 1 < room:
            drained: set[str] = set()  # levels that gave fewer than asked: read them no more this round
            share = self._levels.setdefault(queue, Weighted()).share(room)
            for level, read in (await self.queue.read_levels(queue, name, share)).items():
                got += read
                if len(read) < share[level]:
                    drained.add(level)
            for level in LEVELS:
                if level not in drained:
                    got += await self.queue.read(queue, name, room - len(got), None, priority=level)
        if not got:
            got = await self.queue.read_any(queue, name, block)
            if len(got) <= 1:
                self._quiet.add(queue)
                return got
        self._quiet.discard(queue)
        return got

    def start(self, d: Delivery, reclaimed: bool = False) -> None:
        held = self.state.active.get(d.run_id or "")
        if held is not None and held.delivery.entry_id == d.entry_id:
            return  # our own entry, still being served
        task = asyncio.create_task(self._serve(d, reclaimed))
        self.state.tasks.add(task)

        def done(t: asyncio.Task[None]) -> None:
            self.state.tasks.discard(t)
            self.place_freed.set()

        task.add_done_callback(done)

    async def reclaim(self) -> float:
        """Take over entries whose worker went silent; returns the seconds until the next look.
        Orphans have a lane of their own: up to ``concurrency`` runs beyond the worker's own, so
        that a takeover never waits for the backlog (the runs a dead worker held are bounded by
        its own concurrency). None while Postgres has not answered this worker steadily for a
        lease (``Heartbeat.settled``: since it started, or since it lost Postgres): it could not
        claim them, and reclaiming its own entries would keep them from idling.

        A takeover within TTL + 1 s: an entry can be reclaimed a lease + 0.25 s after its last
        touch, and is looked for every half second at most (no read waits past the next look).
        Entries touched (every third of a lease) are all younger than half a lease: with none
        older on any queue, none can be reclaimed for half a lease, and the next look waits that
        long (an idle worker reclaims every 15 s at the default TTL, not every 0.5 s)."""
        s = self.s
        every = min(max(s.lease_ttl / 4, 0.25), 0.5)
        if not self._settled():
            return every
        # Untouched for a whole lease: its worker's heartbeats (every third of a lease) have
        # stopped; a lease not yet expired is waited for at the claim. Every level, highest first.
        idle = int(s.lease_ttl * 1000) + 250
        ahead = s.lease_ttl / 2 if s.lease_ttl / 2 > every else 0.0
        quiet = True
        for q in self.state.queues:
            if ahead and not await self.queue.any_idle(q, idle - int(ahead * 1000)):
                continue
            quiet = False
            room = self.room_left() + s.concurrency
            if room <= 0:
                return every
            for level in LEVELS:
                for d in await self.queue.reclaim(q, self.state.name, idle, room, priority=level):
                    metrics.reclaimed(q)
                    self.start(d, reclaimed=True)
                    room -= 1
        return ahead if quiet else every

    async def return_early(self) -> None:
        """Entries read past the room and never started go back to the queue at once (else they
        would wait to be reclaimed, once idle for a lease)."""
        read_ahead, self.state.read_ahead = self.state.read_ahead, []
        for d in read_ahead:
            if d.run_id is None:
                continue  # reclaimed and dead-lettered by another worker
            with contextlib.suppress(Exception):  # then reclaimed once idle
                await self.queue.publish(d.queue, d.run_id, priority=d.priority)
                await self._ack(d)
