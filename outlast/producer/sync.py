"""Client is the synchronous facade over ``AsyncClient``, not a second implementation.

It runs one ``AsyncClient`` on a private event loop thread (so it also works inside a program
that has a loop of its own); each of its methods is ``AsyncClient``'s, run there to completion
(``_blocking``), with the same signature and docstring.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, Concatenate, ParamSpec, Self, TypeVar

from outlast._model import Chunk, RunRecord
from outlast.app import App
from outlast.producer.client import AsyncClient
from outlast.settings import Settings

P = ParamSpec("P")
T = TypeVar("T")


class _Loop:
    """``_Loop`` holds the private event loop thread and the ``AsyncClient`` it runs (``aio``)."""

    def __init__(
        self,
        database_url: str | None = None,
        redis_url: str | None = None,
        *,
        app: App | None = None,
        settings: Settings | None = None,
    ) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="outlast-client", daemon=True)
        self._thread.start()

        async def make() -> AsyncClient:
            return AsyncClient(database_url, redis_url, app=app, settings=settings)

        self.aio = self._call(make())
        self.settings = self.aio.settings
        self.note = self.aio.note

    @classmethod
    def from_env(cls, app: App | None = None, **overrides: Any) -> Self:
        return cls(app=app, settings=Settings.from_env(**overrides))

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def close(self) -> None:
        self._call(self.aio.close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _blocking(
    method: Callable[Concatenate[AsyncClient, P], Coroutine[Any, Any, T]],
) -> Callable[Concatenate[_Loop, P], T]:
    """``AsyncClient``'s ``method`` as a method of ``Client``: run on the client's loop, waited for."""

    def call(self: _Loop, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self._call(method(self.aio, *args, **kwargs))

    functools.update_wrapper(call, method)  # its name, docstring and signature, for help()
    return call


class _Runs(_Loop):
    enqueue = _blocking(AsyncClient.enqueue)
    enqueue_many = _blocking(AsyncClient.enqueue_many)
    continue_run = _blocking(AsyncClient.continue_run)
    status = _blocking(AsyncClient.status)
    wait = _blocking(AsyncClient.wait)
    runs = _blocking(AsyncClient.runs)
    events = _blocking(AsyncClient.events)
    journal = _blocking(AsyncClient.journal)
    verify = _blocking(AsyncClient.verify)
    chain = _blocking(AsyncClient.chain)
    generations = _blocking(AsyncClient.generations)
    cancel = _blocking(AsyncClient.cancel)
    resume = _blocking(AsyncClient.resume)
    resume_workflow = _blocking(AsyncClient.resume_workflow)
    fork = _blocking(AsyncClient.fork)
    pause = _blocking(AsyncClient.pause)
    unpause = _blocking(AsyncClient.unpause)
    pauses = _blocking(AsyncClient.pauses)
    pause_of = _blocking(AsyncClient.pause_of)

    def follow(self, run_id: str, after: int = 0, poll: float = 1.0) -> Iterator[dict[str, Any]]:
        """Every event of the run after event ``after``, as it happens, until the run is final
        (``AsyncClient.follow``, one event at a time)."""
        events = self.aio.follow(run_id, after, poll)

        async def next_event() -> dict[str, Any] | None:
            return await anext(events, None)

        try:
            while (event := self._call(next_event())) is not None:
                yield event
        finally:  # stopped early: the listening connection is closed now, not at collection
            self._call(events.aclose())


class _ClientShown(_Loop):
    state = _blocking(AsyncClient.state)
    wait_state = _blocking(AsyncClient.wait_state)

    def stream(self, run_id: str, after: str = "0", block: float = 1.0) -> Iterator[Chunk | RunRecord]:
        """The run's live chunks as they come, then its final record (``AsyncClient.stream``)."""
        items = self.aio.stream(run_id, after, block)

        async def next_item() -> Chunk | RunRecord | None:
            return await anext(items, None)

        try:
            while (item := self._call(next_item())) is not None:
                yield item
        finally:
            self._call(items.aclose())


class _Decisions(_Loop):
    approvals = _blocking(AsyncClient.approvals)
    approval = _blocking(AsyncClient.approval)
    pending_approvals = _blocking(AsyncClient.pending_approvals)
    approve = _blocking(AsyncClient.approve)
    reject = _blocking(AsyncClient.reject)
    revise = _blocking(AsyncClient.revise)
    resolve = _blocking(AsyncClient.resolve)
    requests = _blocking(AsyncClient.requests)
    respond = _blocking(AsyncClient.respond)


class _Messages(_Loop):
    send = _blocking(AsyncClient.send)
    messages = _blocking(AsyncClient.messages)


class _Administration(_Loop):
    prune = _blocking(AsyncClient.prune)
    schedules = _blocking(AsyncClient.schedules)
    pause_schedule = _blocking(AsyncClient.pause_schedule)
    trigger_schedule = _blocking(AsyncClient.trigger_schedule)
    charts = _blocking(AsyncClient.charts)
    parked = _blocking(AsyncClient.parked)


class _Artifacts(_Loop):
    artifacts = _blocking(AsyncClient.artifacts)
    artifact = _blocking(AsyncClient.artifact)
    artifact_of = _blocking(AsyncClient.artifact_of)
    delete_artifact = _blocking(AsyncClient.delete_artifact)


class Client(_Runs, _Artifacts, _ClientShown, _Decisions, _Messages, _Administration):
    """``Client`` is the synchronous facade over ``AsyncClient`` (its ``aio``)."""
