"""The writer gathers a process's writes due at the same moment into shared transactions.

One writer per process commits the writes queued on it in batches, each batch one transaction
and one commit, on up to ``in_flight`` connections at once (its lanes, ``lane.py``). Each write
is still committed before its caller goes on; only the commit is shared. Writes are conditional
statements that return no rows when refused, so one refused write never spoils its neighbours;
a lane retries its own failed batch without touching another lane's.

A run's writes commit in the order they were queued. The rule: while a lane carries a write of a
run (its key), no other lane takes that run's later writes; they wait in the queue, in order, and
go in a later batch. Writes that name no run (key ``""``) follow the same rule as one more key.
With one lane (``in_flight=1``) this is the writer as it always was: a batch is formed when the
lane is free.

Rows of ``runs`` are locked in one global order, by run id, in every transaction: a batch is
sorted by run (keeping each run's own order; each statement touches one run), and the lease
renewal, which touches many runs on a connection of its own, locks them in the same order. Two
transactions, of two lanes or two processes, then never wait for each other in a cycle.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from outlast.errors import ServiceUnavailable
from outlast.store.lane import Conn, Lane, _fail, _Write
from outlast.store.wire import Row, Wire

log = structlog.get_logger("outlast.store")
MAX_BATCH = 256
# How far past the queue's head a free lane looks for writes of runs no other lane carries.
_LOOK_AHEAD = 4 * MAX_BATCH
# The fewest writes a batch beside another in flight carries, and half the fewest split over the
# free lanes: a batch of a few writes costs a commit (and worker CPU) for little.
_SPLIT_FROM = 16


def _key(w: _Write) -> str:
    return w.key


class Writer:
    """Runs one loop that hands queued writes, in batches, to lanes that commit them."""

    def __init__(
        self,
        connect: Callable[[], Awaitable[Conn]],
        unavailable: Callable[[BaseException], ServiceUnavailable],
        retry_for: float,  # the settings' store_retry, passed by the connection
        make_wire: Callable[[Conn], Wire] = Wire,
        pooled: bool = False,
        in_flight: int = 1,  # the settings' writer_in_flight: transactions at once, each a lane
    ) -> None:
        self.lanes = [
            Lane(
                connect=connect,
                unavailable=unavailable,
                retry_for=retry_for,
                make_wire=make_wire,
                pooled=pooled,
            )
            for _ in range(in_flight)
        ]
        # Idle lanes. The others join once the first has committed: it holds the connection the
        # writer cannot do without, and they may not take it first (a server's connection limit).
        self._free = self.lanes[:1]
        self._spare = self.lanes[1:]
        # The runs a lane carries a write of now: their later writes wait for it.
        self._carried: set[str] = set()
        # Writes queued, in order: a deque and one waker, not an asyncio.Queue (whose put and get
        # cost eight Python calls a write; the writer is its only reader and never bounds it).
        self._queue: collections.deque[_Write] = collections.deque()
        self._wake: asyncio.Future[None] | None = None  # the loop's, while it waits
        self._stuck = False  # every write queued is of a run a lane carries: wait for a lane
        self._task: asyncio.Task[None] | None = None
        self._batches: set[asyncio.Task[None]] = set()  # batches in flight beside the loop

    @property
    def retry_for(self) -> float:
        return self.lanes[0].retry_for

    @retry_for.setter
    def retry_for(self, seconds: float) -> None:
        for lane in self.lanes:
            lane.retry_for = seconds

    @property
    def commits(self) -> int:
        return sum(lane.commits for lane in self.lanes)

    @property
    def writes(self) -> int:
        return sum(lane.writes for lane in self.lanes)

    @property
    def busy(self) -> float:
        """Seconds spent committing (and retrying), summed over the lanes."""
        return sum(lane.busy for lane in self.lanes)

    async def write(self, sql: str, params: dict[str, Any], key: str = "") -> list[Row]:
        """Commit one statement (shared with whatever else is due) and return its rows. Raises
        ServiceUnavailable once it could not be committed for ``retry_for`` seconds."""
        return await self.submit(sql, params, key)

    def submit(self, sql: str, params: dict[str, Any], key: str = "") -> asyncio.Future[list[Row]]:
        """Queue one statement now; its rows (or the error ``write`` would raise) come in the
        future. The write is made whether or not anyone still awaits it."""
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._loop(), name="outlast-writer")
        w = _Write(sql, params, key)
        self._queue.append(w)
        self._poke()
        return w.done

    def hurry(self) -> None:
        """From now on a write that fails fails at once, the one being retried too (a worker past
        its grace period: what it cannot write is left to the leases)."""
        for lane in self.lanes:
            lane.hurried = True

    def _poke(self) -> None:
        self._stuck = False
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    async def close(self) -> None:
        for task in [self._task, *self._batches]:
            if task is not None:
                task.cancel()
        await asyncio.gather(
            *(t for t in [self._task, *self._batches] if t is not None), return_exceptions=True
        )
        self._task = None
        for lane in self.lanes:
            await lane.drop()
        while self._queue:  # nobody will commit these: their callers must not hang
            _fail(self._queue.popleft(), ServiceUnavailable("the writer was closed"))

    async def _loop(self) -> None:
        queue = self._queue
        while True:
            while not queue or not self._free or self._stuck or self._too_few():
                self._wake = asyncio.get_running_loop().create_future()
                await self._wake
            self._wake = None
            batch = self._take()
            if not batch:
                self._stuck = True
                continue
            lane = self._free.pop()
            keys = {w.key for w in batch}
            self._carried |= keys  # now, before another batch is taken: not when its task starts
            if len(self.lanes) == 1:  # the lane is the loop's own: no task to start
                await self._commit(lane, batch, keys)
            else:
                task = asyncio.create_task(self._commit(lane, batch, keys), name="outlast-writer-batch")
                self._batches.add(task)
                task.add_done_callback(self._batches.discard)
            # Not kept while waiting for the next: up to MAX_BATCH writes with their parameters
            # and rows (~0.4 MB after a burst of 200 claims and enqueues).
            del batch

    def _too_few(self) -> bool:
        """Whether to wait for more writes before another lane starts a transaction beside one in
        flight: a batch of a few writes costs a commit for little (worker CPU, a round trip)."""
        flying = len(self.lanes) - len(self._free) - len(self._spare)
        return flying > 0 and len(self._queue) < _SPLIT_FROM

    def _take(self) -> list[_Write]:
        """The next batch: the queue's first writes whose runs no lane carries, in order. With
        other lanes free too, its share of the queue: the writes due together are split over the
        free lanes, so that the runs of the first batch done go on while the others commit."""
        queue, carried = self._queue, self._carried
        most = MAX_BATCH
        if len(self._free) > 1 and len(queue) >= 2 * _SPLIT_FROM:
            most = min(MAX_BATCH, -(-len(queue) // len(self._free)))
        if not carried:
            return [queue.popleft() for _ in range(min(len(queue), most))]
        batch: list[_Write] = []
        passed: list[_Write] = []  # a run's later writes are passed too: its key stays carried
        looked = 0
        while queue and len(batch) < most and looked < _LOOK_AHEAD:
            w = queue.popleft()
            looked += 1
            (passed if w.key in carried else batch).append(w)
        queue.extendleft(reversed(passed))
        return batch

    async def _commit(self, lane: Lane, batch: list[_Write], keys: set[str]) -> None:
        if lane is not self.lanes[0] and not lane.commits:
            # A lane beside the first opens its connection before it takes a batch: one the server
            # refuses (max_connections, say) leaves the writer with the lanes it has, and the batch
            # goes back, unsent, to the head of the queue.
            try:
                await lane.open()
            except Exception as exc:
                self.lanes.remove(lane)
                self._queue.extendleft(reversed(batch))
                self._carried -= keys
                log.warning("store.writer_lane_refused", lanes=len(self.lanes), error=str(exc))
                self._poke()
                return
        try:
            # sorted() is stable: each run's writes keep their order.
            await lane.settle(sorted(batch, key=_key))
        finally:
            self._carried -= keys
            self._free.append(lane)
            if self._spare and lane.commits:
                self._free[:0], self._spare = reversed(self._spare), []
            self._poke()
