"""Canonical JSON, hashes, and the journal's SHA-256 chain.

The chain is keyless: it detects corruption and naive rewriting, not a forger who can
recompute every hash.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic_core import to_jsonable_python


def canonical(value: Any) -> str:
    """One text for one value: sorted keys, no spaces, UTF-8 kept."""
    return json.dumps(
        to_jsonable_python(value),
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        allow_nan=False,
    )


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def args_hash(args: Mapping[str, Any]) -> str:
    """The hash an approver sees and a journal entry records for a call's arguments."""
    return digest(canonical(args))


def chain(prev_hash: str, body: str) -> str:
    return digest(prev_hash + body)


@dataclass(frozen=True)
class Entry:
    """One crossing as journaled: its position, its canonical body and its chain hash."""

    seq: int
    kind: str
    op_id: str | None
    body: str
    hash: str

    @property
    def data(self) -> dict[str, Any]:
        value: dict[str, Any] = json.loads(self.body)
        return value


def make_entry(prev_hash: str, seq: int, kind: str, op_id: str | None, data: Mapping[str, Any]) -> Entry:
    """Build the next entry of a chain whose head is ``prev_hash``."""
    body = canonical({"seq": seq, "kind": kind, "op": op_id, **data})
    return Entry(seq, kind, op_id, body, chain(prev_hash, body))


def first_bad_crossing(entries: Iterable[Entry], head: str | None = None) -> int | None:
    """The number of the first entry whose chain does not verify, or None if all do.

    ``head`` is the run row's recorded head: a journal cut short (or one with an entry
    appended by someone else) fails there, at the crossing after the last good one.
    """
    prev = ""
    n = 0
    for n, e in enumerate(entries, start=1):
        ok = e.seq == n and e.hash == chain(prev, e.body)
        if ok:
            data = json.loads(e.body)
            ok = data.get("seq") == e.seq and data.get("kind") == e.kind and data.get("op") == e.op_id
        if not ok:
            return n
        prev = e.hash
    if head is not None and head != prev:
        return n + 1 if n else 1
    return None


def operation_state(entries: Iterable[Entry]) -> tuple[str, Entry | None]:
    """Where one tool operation stands, read from its entries in order, and the entry that says so:

    ``done`` (a result, or a resolution that it executed), ``in_doubt``, ``cleared`` (resolved as
    not executed: it may run once), ``pending`` (an intention or a re-dispatch with no outcome:
    a gap), or ``none``.
    """
    state, last = "none", None
    for e in entries:
        if e.kind in ("intention", "redispatch"):
            state = "pending"
        elif e.kind == "result":
            state = "done"
        elif e.kind == "in_doubt":
            state = "in_doubt"
        elif e.kind == "resolution":
            state = "done" if e.data.get("executed") else "cleared"
        else:
            continue
        last = e
    return state, last
