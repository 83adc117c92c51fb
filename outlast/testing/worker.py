"""This module holds the worker a harness runs in the test's process, and the crash points it can be
stopped at."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from outlast import _failpoints as failpoints
from outlast.app import App
from outlast.queue import Queue
from outlast.settings import Settings
from outlast.store import Store

T = TypeVar("T")


class Crashed(BaseException):
    """``Crashed`` is raised at an armed crash point in the in-process worker
    (``Harness.crash_at``): the run's execution ends there, with no further write. A BaseException,
    as a real crash is not an error a workflow's ``except Exception`` could catch."""


def run_blocking(make: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run a coroutine to the end on a fresh loop in a thread of its own: works from a sync test
    and from inside an async test's running loop alike."""
    box: dict[str, Any] = {}

    def main() -> None:
        try:
            box["value"] = asyncio.run(make())
        except BaseException as exc:  # handed to the caller's thread
            box["error"] = exc

    t = threading.Thread(target=main, name="outlast-testing", daemon=True)
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    value: T = box["value"]
    return value


class InProcessWorker:
    """An ``InProcessWorker`` is a real ``Worker`` with its own Store and Queue, on a thread and
    event loop of its own."""

    def __init__(self, app: App, settings: Settings, queues: list[str]) -> None:
        self.app, self.s, self.queues = app, settings, queues
        self.error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._worker: Any = None
        self._thread = threading.Thread(target=self._main, name="outlast-test-worker", daemon=True)
        self._ready = threading.Event()

    def start(self, timeout: float = 30.0) -> None:
        self._thread.start()
        if not self._ready.wait(timeout):
            raise AssertionError(f"the in-process worker did not start within {timeout:g}s")
        self.raise_error()

    def _main(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # surfaced in the test, not lost in the thread
            self.error = exc
        finally:
            self._ready.set()

    async def _serve(self) -> None:
        from outlast.worker.loop import Worker  # the engine, only once a worker is wanted

        s = self.s
        assert s.database_url and s.redis_url
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(_quiet_crashes)
        store = Store.from_settings(s)
        queue = Queue(s.redis_url, s.prefix, connections=s.concurrency + 16)
        try:
            await store.open()
            for q in self.queues:  # an entry added from now on is delivered (the group reads from 0)
                await queue.ensure_group(q)
            self._worker = Worker(self.app, store, queue, s, self.queues)
            self._loop = loop
            self._ready.set()
            await self._worker.run()
        finally:
            await store.close()
            await queue.close()

    def stop(self) -> None:
        """Stop as on SIGTERM (running runs finish within the grace period or are handed over)."""
        if self._loop is not None and not self._loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop ended already
                self._loop.call_soon_threadsafe(self._worker.stop)
        wait = self.s.grace * 3 + 15
        self._thread.join(wait)
        if self._thread.is_alive():
            raise AssertionError(f"the in-process worker did not stop within {wait:g}s")
        self.raise_error()

    def raise_error(self) -> None:
        if self.error is not None:
            error, self.error = self.error, None
            raise error


def _quiet_crashes(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """The task a crash point ended is never awaited: say nothing of it; the rest as usual."""
    if not isinstance(context.get("exception"), Crashed):
        loop.default_exception_handler(context)


class CrashPoint:
    """A ``CrashPoint`` stands in for ``failpoints.hit`` while armed: raises ``Crashed`` at the
    first crossing of the point (for the tool, if given), then lets every crossing through, as a
    dead worker's successor would."""

    def __init__(self, point: str, tool: str | None) -> None:
        self.point, self.tool = point, tool
        self.hit = threading.Event()
        self._lock = threading.Lock()
        self._through: Callable[..., None] = failpoints.hit

    def __call__(self, name: str, tool: str | None = None) -> None:
        if name == self.point and (self.tool is None or tool == self.tool):
            with self._lock:
                first = not self.hit.is_set()
                self.hit.set()
            if first:
                raise Crashed(f"outlast.testing: crash point {name}{':' + tool if tool else ''}")
        self._through(name, tool)

    def __enter__(self) -> CrashPoint:
        setattr(failpoints, "hit", self)  # noqa: B010 - the engine looks it up at each crossing
        return self

    def __exit__(self, *exc: object) -> None:
        if failpoints.hit is self:
            setattr(failpoints, "hit", self._through)  # noqa: B010


def check_point(point: str) -> None:
    if point not in failpoints.POINTS:
        raise ValueError(f"unknown crash point {point!r}; known: {', '.join(sorted(failpoints.POINTS))}")
