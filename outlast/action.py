"""``current_action()`` tells a running tool what it can know about its own call."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import os
from collections.abc import Coroutine, Generator
from dataclasses import dataclass, field
from typing import Any, Final, Protocol


class LiveSink(Protocol):
    """Where a tool's live chunks go (the worker's ``LiveOutput``)."""

    def send(self, run_id: str, op_id: str | None, chunk: Any) -> None: ...


class ArtifactSaver(Protocol):
    """Where a tool's artifacts go (the worker's ``RunArtifacts``)."""

    def save(
        self, op_id: str, name: str, data_or_path: Any, media_type: str | None, keep: bool
    ) -> Coroutine[Any, Any, dict[str, Any]]: ...


class Saving:
    """An artifact's save under way: ``await`` it in an async tool, or ``.result()`` in a sync one
    (its reference: name, op_id, sha256, size, media_type, keep). Left alone, it is awaited before
    the tool's result is journaled; a save that failed fails the call."""

    def __init__(self, future: asyncio.Future[dict[str, Any]] | concurrent.futures.Future[dict[str, Any]]):
        self._future = future

    def __await__(self) -> Generator[Any, None, dict[str, Any]]:
        f = self._future
        return (asyncio.wrap_future(f) if isinstance(f, concurrent.futures.Future) else f).__await__()

    def result(self, timeout: float | None = None) -> dict[str, Any]:
        if not isinstance(self._future, concurrent.futures.Future):
            raise RuntimeError("in an async tool, await the save rather than ask its result")
        return self._future.result(timeout)


@dataclass(frozen=True)
class Action:
    """An ``Action`` is the identity of one operation: stable across every resume of the run."""

    run_id: str
    operation_id: str
    tool: str
    idempotency_key: str
    fencing_token: int
    charges: dict[str, float] = field(default_factory=dict, compare=False)
    captured: list[Any] = field(default_factory=list, compare=False, repr=False)
    live: LiveSink | None = field(default=None, compare=False, repr=False)
    artifacts: ArtifactSaver | None = field(default=None, compare=False, repr=False)
    saves: list[Saving] = field(default_factory=list, compare=False, repr=False)
    loop: asyncio.AbstractEventLoop | None = field(default=None, compare=False, repr=False)

    def charge(self, **amounts: float) -> None:
        """Report the actual cost of this call (e.g. ``charge(usd=0.02, tokens=812)``); it
        replaces the tool's estimate in the run's budget once the result is committed."""
        for name, amount in amounts.items():
            self.charges[name] = self.charges.get(name, 0.0) + float(amount)

    def capture(self, request: Any) -> None:
        """Keep ``request`` (any JSON value: the body sent, or a dict of URL, headers and body)
        exactly as it leaves the process, at the last point before the call goes out: a model
        tool calls this with what the model receives, after the prompt's assembly, retrieval,
        compaction and any middleware. It is journaled with the operation, before its result,
        with the call's secret argument values masked; the last capture of a dispatch is kept
        (a retry's request replaces the one before). Shown by ``outlast status RUN --op OP``,
        the run's page and the debug bundle."""
        self.captured.append(request)

    def stream(self, chunk: Any) -> None:
        """Send ``chunk`` (a text, or any JSON value, up to 64 KiB) to the run's live readers
        (``client.stream(run_id)``) now, without waiting. Not journaled: at most once (a chunk lost
        with its worker is lost, and a tool dispatched again streams again). Outside a worker
        (an offline replay, a reconciler) it goes nowhere."""
        if self.live is not None:
            self.live.send(self.run_id, self.operation_id, chunk)

    def save_artifact(
        self,
        name: str,
        data_or_path: bytes | str | os.PathLike[str],
        media_type: str | None = None,
        *,
        keep: bool = False,
    ) -> Saving:
        """Save a file as an artifact of the run, under ``name``: ``bytes``, or a path (``str`` or
        ``os.PathLike``) read whole. Stored once in the payload store, indexed by (run, this
        operation, name); saved again by a dispatch of the same operation with the same bytes, it
        writes nothing. ``media_type``: guessed from the name if not given. ``keep=True``: kept
        past the run's retention. Returns the save under way (``Saving``)."""
        if self.artifacts is None or self.loop is None:
            raise RuntimeError("save_artifact() needs a worker: this call has nowhere to save")
        made = self.artifacts.save(self.operation_id, name, data_or_path, media_type, keep)
        try:
            here = asyncio.get_running_loop()
        except RuntimeError:
            here = None
        if here is self.loop:  # an async tool
            saving = Saving(self.loop.create_task(made))
        else:  # a sync tool, on a tool thread
            saving = Saving(asyncio.run_coroutine_threadsafe(made, self.loop))
        self.saves.append(saving)
        return saving

    async def saved(self) -> None:
        """Wait for the artifacts' saves this call started (the first failure raised)."""
        for saving in self.saves:
            await saving


class _NotExecuted:
    def __repr__(self) -> str:
        return "NOT_EXECUTED"


NOT_EXECUTED: Final = _NotExecuted()
"""A reconciler's answer when it knows the action did not happen."""

_current: contextvars.ContextVar[Action] = contextvars.ContextVar("outlast_action")


def current_action() -> Action:
    """The action of the tool running now (inside a tool or reconciler only)."""
    try:
        return _current.get()
    except LookupError:
        raise RuntimeError("current_action() is only available inside a tool or a reconciler") from None


def set_action(action: Action) -> contextvars.Token[Action]:
    return _current.set(action)


def reset_action(token: contextvars.Token[Action]) -> None:
    _current.reset(token)
