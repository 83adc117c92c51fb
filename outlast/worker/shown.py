"""``Showing`` gives a run what it shows while it runs: its state (``run.set_state``), its custom events
(``run.emit``) and its live output (``run.stream``).

State and events are journaled crossings: the entry (kind ``state`` or ``event``) is appended by
the fenced append, whose statement also writes the state row or the event row (migration 0025's
trigger), so the journal and what readers see never disagree; a replay serves the entry and
writes nothing. Live chunks are not journaled: they go to the worker's ``LiveOutput`` (Redis), at
most once.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable
from typing import Any

from outlast import _failpoints as failpoints
from outlast._journal import jsonable
from outlast.errors import InvalidInput
from outlast.worker.replayer import Replayer
from outlast.worker.scope import RunScope

MAX_KEY = 200  # characters of a state key
# A custom event's kind: a word of letters, digits, '_', '-', '.'; shown as ``custom:KIND``.
_KIND = re.compile(r"[A-Za-z0-9_.\-]{1,100}")
CUSTOM = "custom:"


class RunShown:
    """The run's state, custom events and live output."""

    def __init__(self, scope: RunScope) -> None:
        self._replayer = scope.replayer
        self._secrets = scope.secrets
        self._live = scope.live
        # A value past OUTLAST_MAX_PAYLOAD is held by reference (``Replayer._offloaded``), the
        # state row or event holding the reference: refused past OUTLAST_MAX_REFERENCED only.
        self._max_payload = scope.writes.referenced or scope.max_payload

    async def set_state(self, op_id: str, key: str, value: Any) -> None:
        run_id = self._replayer.run_id
        if not isinstance(key, str) or not 1 <= len(key) <= MAX_KEY:
            raise InvalidInput(
                f"run '{run_id}': a state key is a text of 1 to {MAX_KEY} characters, got {key!r}"
            )
        await self._shown(op_id, "state", "key", key, {"key": key, "value": value}, f"set_state({key!r})")

    async def emit(self, op_id: str, kind: str, data: Any) -> None:
        run_id = self._replayer.run_id
        if not isinstance(kind, str) or _KIND.fullmatch(kind) is None:
            raise InvalidInput(
                f"run '{run_id}': an event kind is 1 to 100 letters, digits, '_', '-' or '.', got {kind!r}"
            )
        await self._shown(op_id, "event", "event", kind, {"event": kind, "data": data}, f"emit({kind!r})")

    def stream(self, op_id: str | None, chunk: Any) -> None:
        """Send ``chunk`` to the run's live readers now, not waiting (at most once)."""
        if self._live is not None and not self._replayer.replaying():
            self._live.send(self._replayer.run_id, op_id, chunk)

    async def _shown(
        self, op_id: str, kind: str, field: str, name: str, data: dict[str, Any], asks: str
    ) -> None:
        replayer = self._replayer
        replayer.enter(op_id)
        if replayer.journaled(op_id):
            e = replayer.entry(op_id, kind)
            if e is None or e.fields.get(field) != name:
                raise replayer.mismatch(op_id, asks)
            return
        value = "value" if kind == "state" else "data"
        try:
            data[value] = self._secrets.scrub(jsonable(data[value], self._max_payload))
        except InvalidInput as exc:
            raise InvalidInput(f"run '{replayer.run_id}': {asks} at {op_id}: {exc}") from None
        await replayer.go_live(op_id, lambda: asks)
        await replayer.append(kind, op_id, data)
        failpoints.hit("after_shown", kind)


class Showing:
    """What a run shows, as the workflow's ``Run`` offers it (``Run`` builds ``_shown``)."""

    _shown: RunShown
    _replayer: Replayer

    def set_state(self, key: str, value: Any) -> Awaitable[None]:
        """Show ``value`` (any JSON value) under ``key``: journaled once (a replay writes nothing),
        read by ``client.state(run_id, key)`` with the key's version (1, then one more each set)."""
        return self._shown.set_state(self._replayer.position(), key, value)

    def emit(self, kind: str, data: Any = None) -> Awaitable[None]:
        """Add the event ``custom:KIND`` with ``data`` to the run's events, exactly once."""
        return self._shown.emit(self._replayer.position(), kind, data)

    def stream(self, chunk: Any) -> None:
        """Send a live chunk (a text, or a JSON value) to ``client.stream(run_id)``'s readers now,
        not journaled: at most once. Not sent while the run replays what it did before."""
        self._shown.stream(None, chunk)
