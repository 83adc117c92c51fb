"""``Inbox`` holds a run's side of its messages: ``receive`` and ``callback``.

``receive(channel, timeout)`` serves a message the run already took from its journal (in the
same order, never from the inbox); going live, it looks at the channel's inbox and takes the
oldest message there with the journal entry that records it, in one fenced statement (``take``:
a stale worker cannot take it, a crash cannot take it twice). With none there, the run lingers a
moment held by its worker, woken by a send (``linger.py``); with none still, it waits
(``waiting``, reason ``message``, the channel in ``waits_for``) with no worker held, committed
only if no message was accepted since the look: a send that raced the wait either came first
(the worker looks again) or finds the run waiting and wakes it. A ``timeout`` is a durable timer:
its due time is journaled once (a ``receive`` entry), and the run's wake-up time.

A message whose payload the channel's declared type refuses (stored unchecked, by ``outlast_send``)
is never taken: the look sets it aside, kept with why, and looks again; the run goes on waiting.

The pieces are separate (``timer``, ``look``, ``take``, ``wait``, ``served``) so that a wait made of
several (``run.first``, ``first.py``) can use them.
"""

from __future__ import annotations

import asyncio
import functools
import math
from datetime import datetime, timedelta
from typing import Any

import structlog

from outlast import _failpoints as failpoints
from outlast._callbacks import sign, url
from outlast._channels import check_channel, from_json, unfit
from outlast._journal import Entry
from outlast._payloads import PAYLOAD, column_ref
from outlast.errors import Fenced, InvalidInput
from outlast.worker.control import Suspended
from outlast.worker.waits import Waits

log = structlog.get_logger("outlast.run")

MAX_EXPIRY = 366 * 86400.0  # a callback is good for a year at most


class Inbox(Waits):
    """The run's durable waits (``Waits``: timers, approvals) and its side of its messages."""

    def check_receive(self, channel: str, timeout: float | None) -> None:
        """A receive's channel (declared, if the workflow declares channels) and timeout."""
        if not isinstance(channel, str) or not channel:
            raise InvalidInput(f"run '{self.run_id}': receive needs a channel name, got {channel!r}")
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout < 0
        ):
            raise InvalidInput(f"run '{self.run_id}', channel '{channel}': timeout must be seconds >= 0")
        check_channel(self._channels, f"run '{self.run_id}', channel '{channel}'", channel)

    async def receive(self, op_id: str, channel: str, timeout: float | None) -> Any:
        self.check_receive(channel, timeout)
        r = self._replayer
        r.enter(op_id)
        until = await self.timer(op_id, channel, timeout)
        got = r.entry(op_id, "message")
        if got is None and r.journaled(op_id) and until is None:
            raise r.mismatch(op_id, f"receive({channel!r})")
        if got is None:
            await self._settled()  # calls made in parallel journal their results before a wait
            await r.go_live(op_id, lambda: f"receive({channel!r})")
            got = await self.live(op_id, channel, until)
        data = got.data  # decoded once: a message held by reference is decoded from its text
        if data.get("channel") != channel:
            raise r.mismatch(op_id, f"receive({channel!r})")
        return self.served(channel, data)

    async def live(self, op_id: str, channel: str, until: datetime | None) -> Entry:
        """The receive gone live: the message taken, or the timeout journaled; with none yet, the
        run lingers held a moment (``linger.py``), then waits (``Suspended``)."""
        r, linger = self._replayer, self._control.linger
        while True:
            got, seen = await self.take(op_id, channel)
            if got is None and linger is not None:
                left = math.inf if until is None else (until - r.db_now()).total_seconds()
                look = functools.partial(self.take, op_id, channel)
                held = await linger.hold(self.run_id, look, left, self._control.leaving)
                linger = None  # once per receive: a wait that failed (a message came) looks again
                if held is not None:
                    got, seen = held
            if got is not None:
                return got
            if until is not None and until <= r.db_now():
                return await r.append("message", op_id, {"channel": channel, "timeout": True})
            if self._control.cancel.is_set():
                await r.go_live(op_id)  # a cancellation seen while it lingered ends the run now
            if await self.wait(channel, seen, until):
                raise Suspended(until)

    def served(self, channel: str, taken: dict[str, Any]) -> Any:
        """What a receive returns for what it took: the payload (as the channel's declared type, if
        any), or None for a timeout."""
        if taken.get("timeout"):
            return None
        return from_json(
            self._channels, f"run '{self.run_id}', channel '{channel}'", channel, taken["payload"]
        )

    async def timer(self, op_id: str, channel: str, timeout: float | None) -> datetime | None:
        """A receive's timeout: its due time, journaled once (None: no timeout)."""
        if timeout is None:
            return None
        r = self._replayer
        if r.journaled(op_id):
            e = r.entry(op_id, "receive")
            if e is None or e.data.get("channel") != channel:
                raise r.mismatch(op_id, f"receive({channel!r}, timeout={timeout})")
            return datetime.fromisoformat(e.data["until"])
        await r.go_live(op_id, lambda: f"receive({channel!r}, timeout={timeout})")
        due = r.db_now() + timedelta(seconds=timeout)
        await r.append("receive", op_id, {"channel": channel, "until": due.isoformat()})
        return due

    async def take(self, op_id: str, channel: str) -> tuple[Entry | None, int]:
        """Take the channel's oldest message, journaled (one fenced statement); or None and the
        run's count of accepted messages, which a wait must still find. Receives made in parallel
        look and take one at a time: two never reach for the same message."""
        async with self.taking:
            data, seen, held = await self._look(channel)
            if data is None:
                return None, seen
            if held is None:
                entry = await self._replayer.append("message", op_id, data, take=data["message_id"])
            else:  # by the reference its row holds: the payload is not serialised again
                entry = await self._replayer.append_held(
                    "message", op_id, data, PAYLOAD, *held, take=data["message_id"]
                )
            del data, held  # the entry keeps the text it was read from; the value is decoded from it
        failpoints.hit("after_take", channel)
        return entry, seen

    @property
    def taking(self) -> asyncio.Lock:
        """Held from a look to its take (``run.first`` holds it too)."""
        return self._taking

    async def look(self, channel: str) -> tuple[dict[str, Any] | None, int]:
        """The channel's oldest untaken message the run can take, as a take journals it (None:
        none; one its type refuses is set aside on the way), and the run's count of accepted
        messages; ``Fenced`` if the run is no longer held."""
        data, seen, _ = await self._look(channel)
        return data, seen

    async def _look(
        self, channel: str
    ) -> tuple[dict[str, Any] | None, int, tuple[dict[str, Any], str | bytes] | None]:
        """``look``'s, and for a payload held by reference its reference and the text read."""
        held: tuple[dict[str, Any], str | bytes] | None = None
        control = self._control
        while True:
            look = await control.db(self._messages.inbox(self.run_id, control.token, channel))
            if look is None or not look["held"]:
                raise Fenced(self.run_id, control.token)
            if look["cancel_requested"]:
                control.cancelled()  # as a heartbeat would say, later
            if look["message_id"] is None:
                return None, int(look["messages_sent"]), None
            held = None
            if (ref := column_ref(look["payload"], PAYLOAD)) is not None:  # a large message
                look["payload"], got = await control.db(
                    self._messages.whole_and_text(self.run_id, ref, PAYLOAD)
                )
                self._writes.stored.add(ref["sha256"])  # its take's entry refers to the same value
                held = (ref, got) if self._writes.inline_max is not None else None
            why = unfit(self._channels, channel, look["payload"])
            if why is None:
                break
            message_id = look["message_id"]
            aside = self._messages.set_aside(self.run_id, control.token, message_id, why)
            await control.db(self._writes.fenced("set_aside", aside))
            log.warning("message.set_aside", run_id=self.run_id, channel=channel, message_id=message_id)
        data = {
            "channel": channel,
            "message_id": look["message_id"],
            "number": look["seq"],  # the run's n-th message (not "seq": the entry's own)
            "payload": look["payload"],
        }
        return data, int(look["messages_sent"]), held

    async def wait(self, channel: str, seen: int, until: datetime | None) -> bool:
        """Commit the run's wait on ``channel`` (fenced), unless a message was accepted since the
        run's count was ``seen`` (False: look again)."""
        control = self._control
        waiting = self._messages.await_message(self.run_id, control.token, channel, seen, until)
        return bool(await control.db(self._writes.fenced("wait", waiting)))

    async def callback(self, op_id: str, channel: str, expires_in: float) -> str:
        """A callback URL for ``channel``, valid ``expires_in`` seconds: its expiry and the run's
        incarnation journaled once (never the token, which a reader of the journal could use), the
        token signed again from them on a replay (an entry journaled before incarnations: without
        one). The token is a known secret of the run from then on: masked wherever the URL would
        be stored, logged or shown."""
        where = f"run '{self.run_id}', channel '{channel}'"
        check_channel(self._channels, where, channel)
        if (
            isinstance(expires_in, bool)
            or not isinstance(expires_in, int | float)
            or not 0 < expires_in <= MAX_EXPIRY
        ):
            raise InvalidInput(f"{where}: a callback's expires_in must be seconds in (0, {MAX_EXPIRY:.0f}]")
        secret_key, base = self._callbacks
        r = self._replayer
        r.enter(op_id)
        if r.journaled(op_id):
            e = r.entry(op_id, "callback")
            if e is None or e.data.get("channel") != channel:
                raise r.mismatch(op_id, f"callback({channel!r})")
            expires_at, born = datetime.fromisoformat(e.data["expires_at"]), e.data.get("born")
        else:
            await r.go_live(op_id, lambda: f"callback({channel!r})")
            expires_at, born = (r.db_now() + timedelta(seconds=expires_in)).replace(microsecond=0), self.born
            sign(secret_key, self.run_id, channel, expires_at)  # no key: refused before journaling
            entry = {"channel": channel, "expires_at": expires_at.isoformat(), "born": born}
            await r.append("callback", op_id, entry)
        token = sign(secret_key, self.run_id, channel, expires_at, born)
        self._secrets.known(token)
        return url(base, token)
