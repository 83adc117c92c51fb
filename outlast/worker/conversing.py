"""``Conversing`` gives a run the crossings of a conversation with the world.

They are messages in (``receive``), callbacks (``callback``), typed requests answered from outside
(``request``) and the first of several waits (``first``). Each is a durable wait or a journaled
crossing, handed to the part that owns it: the waits and the inbox (``waits.py``, ``inbox.py``),
the requests (``requests.py``) and ``First`` (``first.py``). ``Run`` builds those parts.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, TypeVar

from outlast.worker.first import First
from outlast.worker.inbox import Inbox
from outlast.worker.replayer import Replayer
from outlast.worker.requests import RunRequests
from outlast.worker.wait import Wait, Won

R = TypeVar("R")


class Conversing:
    """``Conversing`` holds the crossings of a conversation, as the workflow's ``Run`` offers them."""

    _replayer: Replayer
    _waits: Inbox
    _requests: RunRequests
    _first: First

    async def _pausing(self, wait: Awaitable[R]) -> R:
        raise NotImplementedError  # Run's

    def request(
        self,
        name: str,
        payload: Any = None,
        *,
        response: type[R],
        responders: list[str] | None = None,
        expires_in: float | None = None,
    ) -> Wait[R]:
        """Publish a request and wait (reason ``request``, no worker held) for its first valid
        answer, as a ``response`` (a type pydantic validates), from one of ``responders`` (none:
        any operator); unanswered after ``expires_in`` seconds, ``RequestExpired``."""
        op_id = self._replayer.position()
        spec: dict[str, Any] = {"name": name, "payload": payload, "response": response}
        spec |= {"responders": list(responders or []), "expires_in": expires_in}
        return Wait("request", op_id, spec, lambda: self._pausing(self._requests.request(op_id, **spec)))

    def first(self, *waits: Wait[Any]) -> Awaitable[Won]:
        """The first of ``waits`` to be ready (a timer due, an answer, a decision, a child's end, a
        message):
        ``Won(index, value)``, one journal entry, replayed the same; the others are withdrawn.
        The run waits meanwhile with no worker held (reason ``first``)."""
        op_id = self._replayer.position()
        return self._pausing(self._first.first(op_id, list(waits)))

    def receive(self, channel: str, timeout: float | None = None) -> Wait[Any]:
        """The next message on ``channel``, oldest first (as its declared type, if any), or None
        once ``timeout`` seconds pass (a durable timer). The run waits (reason ``message``) with
        no worker held; a message it took is served from its journal on every resume. Given to
        ``first``, it takes a message only if it wins."""
        op_id = self._replayer.position()
        spec: dict[str, Any] = {"channel": channel, "timeout": timeout}
        return Wait(
            "message", op_id, spec, lambda: self._pausing(self._waits.receive(op_id, channel, timeout))
        )

    def callback(self, channel: str, *, expires_in: float = 86400.0) -> Awaitable[str]:
        """An unguessable URL whose POSTed body becomes a message on ``channel`` of this run, good
        for ``expires_in`` seconds (journaled once; signed with ``OUTLAST_SECRET_KEY``)."""
        return self._waits.callback(self._replayer.position(), channel, expires_in)
