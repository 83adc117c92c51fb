"""``Conversing`` gives a run the crossings of a conversation with the world.

They are messages in (``receive``), callbacks (``callback``), typed requests answered from outside
(``request``), the first of several waits (``first``), and carrying a conversation that never
ends forward into a new generation of its journal (``carry_forward``). Each is a durable wait or a journaled
crossing, handed to the part that owns it: the waits and the inbox (``waits.py``, ``inbox.py``),
the requests (``requests.py``) and ``First`` (``first.py``). ``Run`` builds those parts.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, NoReturn, TypeVar

from outlast._journal import Unstorable, jsonable
from outlast._payloads import too_large
from outlast.errors import InvalidInput
from outlast.worker.control import CarriedForward
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
    _max_payload: int | None

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

    async def carry_forward(self, input: dict[str, Any] | None = None) -> NoReturn:
        """End this generation of the run's journal and start the next, the workflow called
        again from its start with ``input``: the same run (its id, messages, state, events,
        budget and deadline), a short journal. Never returns. Messages not yet taken wait for
        the next generation; the ended one stays readable until it is pruned."""
        op_id = self._replayer.position()
        self._replayer.enter(op_id)
        if self._replayer.journaled(op_id):  # a carry is never journaled: the code asks otherwise
            raise self._replayer.mismatch(op_id, "carry_forward()")
        await self._replayer.go_live(op_id, lambda: "carry_forward()")
        data = {} if input is None else input
        if not isinstance(data, dict):
            run_id = self._replayer.run_id
            raise InvalidInput(
                f"run '{run_id}': carry_forward at {op_id} takes a dict of the workflow's input"
            )
        try:
            carried = jsonable(data, self._max_payload)
        except Unstorable as exc:
            raise too_large(self._replayer.run_id, f"carry_forward at {op_id}", exc) from None
        raise CarriedForward(carried, self._replayer.positions)
