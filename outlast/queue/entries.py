"""This module says what a stream entry is, once read. It holds a ``Delivery`` (decoded here one entry at a
time, so that an entry nobody can serve names its ``problem`` instead of failing the batch it came
in), the figures of a queue, and the names every part of the queue shares (the consumer group, the
priority levels)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from outlast._model import PRIORITIES

GROUP = "workers"
MAX_RUN_ID = 200

# A queue's priority levels, highest first: one stream each (``normal`` is the queue's stream of
# old, ``outlast:{default}:runs``; the others ``outlast:{default}:runs:high``, ``...:low``).
LEVELS = PRIORITIES
# Unicode's control characters (category Cc: C0, DEL and C1), in one C scan of a run id.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


@dataclass(frozen=True)
class Delivery:
    """A ``Delivery`` is one stream entry handed to this consumer. ``problem`` says why it cannot be
    served (then ``run_id`` is None and the entry belongs in the dead-letter stream)."""

    queue: str
    entry_id: str
    fields: dict[str, str]
    problem: str | None = None
    # The entry as stored, kept only when it is not UTF-8 (``fields`` then holds escapes).
    raw: tuple[tuple[bytes, bytes], ...] = field(default=(), repr=False, compare=False)
    priority: str = "normal"  # the level whose stream it came from

    @property
    def run_id(self) -> str | None:
        if self.problem is not None:
            return None
        return self.fields.get("run") or None


@dataclass(frozen=True)
class QueueFigures:
    """``QueueFigures`` holds what ``Queue.figures`` found for one queue."""

    queue: str
    length: int  # entries in the stream: waiting to be read, or pending
    pending: int  # delivered to a worker, not yet acknowledged
    oldest_pending_age: float | None  # seconds since the oldest pending entry was added
    dead_letters: int


def run_id_problem(run_id: str | None) -> str | None:
    """Why a stream entry's run id cannot name a run, or None when it can."""
    if run_id is None:
        return "no 'run' field"
    if not run_id:
        return "empty run id"
    if len(run_id) > MAX_RUN_ID:
        return f"run id {run_id[:40]!r}... is longer than {MAX_RUN_ID} characters"
    if _CONTROL.search(run_id):
        return f"run id {run_id[:60]!r} has NUL or control characters"
    return None


def to_bytes(value: bytes | str | int | float) -> bytes:
    if isinstance(value, bytes):
        return value
    return str(value).encode()


def to_text(value: bytes | str) -> str:
    return value.decode(errors="backslashreplace") if isinstance(value, bytes) else value


def decode_entry(
    queue: str, entry_id: bytes | str, fields: dict[Any, Any], priority: str = "normal"
) -> Delivery:
    raw = tuple((to_bytes(k), to_bytes(v)) for k, v in fields.items())
    try:
        decoded = {k.decode(): v.decode() for k, v in raw}
    except UnicodeDecodeError:
        loose = {to_text(k): to_text(v) for k, v in raw}
        return Delivery(queue, to_text(entry_id), loose, "entry is not UTF-8", raw, priority)
    return Delivery(queue, to_text(entry_id), decoded, run_id_problem(decoded.get("run")), priority=priority)
