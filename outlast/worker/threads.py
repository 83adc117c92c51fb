"""Sync tools are run on daemon threads, reused from one dispatch to the next.

Starting a thread per dispatch cost the event loop about 140 µs a sync call (``Thread.start``
waits for the new thread to signal it runs). Here a call is a job put on a queue that idle
threads take. A thread is only started when no thread is idle: a tool that hangs keeps its
thread, and the next call gets a new one, so hung tools never starve the others. Results that come
back while the loop is busy are settled together, by one wake-up of the loop. Threads idle
for ``RETIRE_AFTER`` seconds beyond the ``base`` kept go away. They are daemon threads: a hung
tool never keeps the process from exiting (SIGTERM still ends a worker after its grace). Their
count (busy, idle) is in the worker's heartbeat record (``outlast workers``) and the
``outlast_tool_threads`` gauge.
"""

from __future__ import annotations

import asyncio
import contextvars
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from outlast.worker.control import SyncCalls

RETIRE_AFTER = 60.0  # seconds a thread beyond the base waits for work before it ends


@dataclass(frozen=True)
class _Job:
    fn: Callable[..., Any]
    args: dict[str, Any]
    context: contextvars.Context  # the caller's: current_action() inside the tool
    loop: asyncio.AbstractEventLoop
    done: asyncio.Future[Any]


_Result = tuple[asyncio.Future[Any], Any, BaseException | None]


class ToolThreads:
    """``ToolThreads`` is a pool of daemon threads for sync tools that grows past any number of hung
    calls."""

    def __init__(self, base: int = 4, retire_after: float = RETIRE_AFTER) -> None:
        self.base = base  # threads kept however long they idle
        self._retire_after = retire_after
        self._jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0  # alive
        self._free = 0  # idle threads not yet promised a job put on the queue
        # Results a loop has yet to settle: the first of a batch wakes the loop, the rest join it.
        self._settling: dict[asyncio.AbstractEventLoop, list[_Result]] = {}

    def keep(self, n: int) -> None:
        """Keep at least ``n`` threads once started (a worker keeps as many as its concurrency)."""
        with self._lock:
            self.base = max(self.base, n)

    @property
    def count(self) -> int:
        """Threads alive: busy (on a tool, maybe a hung one) or idle."""
        return self._threads

    @property
    def busy(self) -> int:
        """Threads on a tool now (a job queued for an idle thread counts as its thread's)."""
        with self._lock:
            return self._threads - self._free

    async def call(
        self, fn: Callable[..., Any], args: dict[str, Any], awaited: SyncCalls | None = None
    ) -> Any:
        """``fn(**args)`` on one of the threads; its result or exception, awaited here (and held in
        ``awaited`` meanwhile). Given up on (cancelled, a ``timeout=``, abandoned by ``awaited``),
        the call goes on in its thread and its late result is dropped."""
        loop = asyncio.get_running_loop()
        job = _Job(fn, args, contextvars.copy_context(), loop, loop.create_future())
        with self._lock:
            start = self._free == 0
            if start:
                self._threads += 1
            else:
                self._free -= 1
        if start:  # every thread is busy (or hung): a new one, never a wait behind them
            threading.Thread(target=self._serve, name="outlast-tool", daemon=True).start()
        self._jobs.put(job)
        if awaited is None:
            return await job.done
        awaited.add(job.done)
        try:
            return await job.done
        finally:
            awaited.discard(job.done)

    def _serve(self) -> None:
        while True:
            try:
                job = self._jobs.get(timeout=self._retire_after)
            except queue.Empty:
                with self._lock:
                    # Retire only a thread no queued job counts on (``_free`` covers them all).
                    if self._free > 0 and self._threads > self.base:
                        self._free -= 1
                        self._threads -= 1
                        return
                continue
            try:
                value, exc = job.context.run(job.fn, **job.args), None
            except BaseException as e:  # handed to the awaiting coroutine, whatever it is
                value, exc = None, e
                if isinstance(e, StopIteration):  # a Future refuses it: as a coroutine's would be
                    exc = RuntimeError(f"{getattr(job.fn, '__name__', 'tool')} raised StopIteration")
                    exc.__cause__ = e
            self._post(job.loop, (job.done, value, exc))
            del job, value, exc  # an idle thread holds no caller's arguments, result or loop

    def _post(self, loop: asyncio.AbstractEventLoop, result: _Result) -> None:
        """Hand a result to its loop. Results that arrive before the loop settles them go in one
        batch: only the first wakes the loop (a write to its self-pipe, and the GIL handed over)."""
        with self._lock:  # free before the caller hears back: its next call finds this thread
            self._free += 1
            batch = self._settling.get(loop)
            if batch is not None:
                batch.append(result)
                return
            for gone in [other for other in self._settling if other.is_closed()]:
                del self._settling[gone]  # closed before it settled its batch: nobody waits
            self._settling[loop] = [result]
        try:
            loop.call_soon_threadsafe(self._settle, loop)
        except RuntimeError:  # the loop is closed: nobody waits any more
            with self._lock:
                self._settling.pop(loop, None)

    def _settle(self, loop: asyncio.AbstractEventLoop) -> None:
        with self._lock:
            batch = self._settling.pop(loop)
        for done, value, exc in batch:
            if done.done():  # given up on (a timeout, a cancellation, abandoned): late result refused
                continue
            if exc is None:
                done.set_result(value)
            else:
                done.set_exception(exc)


TOOL_THREADS = ToolThreads()  # the process's: a hung tool holds its thread for the process's life
