"""This module says what a ``capture`` entry stores by delta, and rebuilds each request whole.

A captured request that is a JSON object with a ``messages`` list (a model's conversation) is
stored as what changed since the previous capture of the same tool in the run, its **base**:

- ``base``: the base's ``request_hash`` (absent on the first capture of a tool);
- ``messages``: the request's messages in order, each as its hash (the SHA-256 of its stored
  JSON text), or as a slice ``[i, j]`` of the base's messages (a history that extends the
  base's is one slice and the hashes of the messages appended);
- ``new``: the messages stored for the first time in the run, by hash: a message is stored once
  per run, whichever capture first held it (a history trimmed or compacted stores only what no
  earlier capture held);
- ``rest``: the request without its messages (settings, tool names), whole;
- ``request_hash`` and ``bytes``: of the whole request's canonical JSON text, as a capture stored
  whole has them, so that the hash means the same thing whatever the storage.

Every other request is stored whole (``request``), as is every capture journaled before. The
entry is chained like every entry, so the chain covers every stored message. ``requests`` rebuilds
each capture of a journal whole: what ``outlast status --op``, the run's page and the bundle show.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from outlast._journal import Entry, canonical

MESSAGES = "messages"
DELTA_KEYS = frozenset({"base", MESSAGES, "new", "rest"})  # a delta capture's keys, not shown


class Message(dict[str, Any]):
    """One message of a captured conversation that is never changed once made (pydantic-ai's
    messages, as ``outlast.agents`` dumps them once each): the worker masks and hashes it once per
    run, found again by identity at each later capture, not by its text."""

    __slots__ = ()


def framing(rest: dict[str, Any]) -> tuple[str, str]:
    """The text before and after the messages' items in the whole request's canonical JSON text
    (keys sorted: those before ``messages``, then its ``[``; its ``]``, then those after)."""
    before = canonical({k: v for k, v in rest.items() if k < MESSAGES})[:-1]
    after = canonical({k: v for k, v in rest.items() if k > MESSAGES})[1:]
    head = before + ("," if len(before) > 1 else "") + '"messages":['
    return head, "]" + ("," if len(after) > 1 else "") + after


def expand(segments: list[Any], base: list[str] | None) -> list[str] | None:
    """The messages' hashes a delta's ``messages`` says, given its base's; None if it refers to
    messages of a base not found (not in this journal)."""
    hashes: list[str] = []
    for s in segments:
        if isinstance(s, str):
            hashes.append(s)
        elif base is None or s[1] > len(base):
            return None
        else:
            hashes.extend(base[s[0] : s[1]])
    return hashes


def requests(entries: Iterable[Entry]) -> dict[int, dict[str, Any]]:
    """Each capture entry's data (by its seq) as it is shown: the request whole (``request``),
    rebuilt from its delta and the captures before it; or why it cannot be (``withheld``)."""
    bodies: dict[str, Any] = {}
    lists: dict[str, list[str]] = {}  # a capture's request_hash -> its messages' hashes
    shown: dict[int, dict[str, Any]] = {}
    for e in entries:
        if e.kind != "capture":
            continue
        d = e.data
        if "rest" not in d:
            shown[e.seq] = d  # stored whole (or withheld, before captures by delta)
            continue
        bodies.update(d.get("new", {}))
        hashes = expand(d[MESSAGES], lists.get(d.get("base", "")))
        kept = {k: v for k, v in d.items() if k not in DELTA_KEYS}
        if hashes is None:
            lost = f"its base capture {d.get('base', '')[:16]} is not in the journal"
            shown[e.seq] = {**kept, "withheld": lost}
            continue
        lists[d["request_hash"]] = hashes
        missing = [h for h in hashes if h not in bodies]
        if missing:
            shown[e.seq] = {**kept, "withheld": f"{len(missing)} message(s) missing, e.g. {missing[0][:16]}"}
            continue
        request = {**d["rest"], MESSAGES: [bodies[h] for h in hashes]}
        shown[e.seq] = {**kept, "request": dict(sorted(request.items()))}
    return shown


def shown_data(e: Entry, whole: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """An entry's data as a person reads it: a capture's request whole (``whole``: ``requests``)."""
    return whole[e.seq] if e.seq in whole else e.data
