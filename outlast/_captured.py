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
- ``texts``: where a new message's long strings (``LONG`` characters or more) are found in an
  earlier entry of the run that holds the same string (a tool's result, read back to the model; a
  model's answer, sent back to it): by the message's hash, each as ``[path in the message, the
  entry's seq, path in its data]``, the string left ``null`` in ``new``. A tool's result that the
  model receives is stored once, in the tool's result. A message so rebuilt is checked against its
  hash: one whose entry is changed or not in the journal is not shown (``withheld``);
- ``rest``: the request without its messages (settings, tool names), whole;
- ``request_hash`` and ``bytes``: of the whole request's canonical JSON text, as a capture stored
  whole has them, so that the hash means the same thing whatever the storage.

Every other request is stored whole (``request``), as is every capture journaled before. The
entry is chained like every entry, so the chain covers every stored message. ``requests`` rebuilds
each capture of a journal whole: what ``outlast status --op``, the run's page and the bundle show.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from outlast._journal import Entry, canonical, digest

MESSAGES = "messages"
TEXTS = "texts"
DELTA_KEYS = frozenset({"base", MESSAGES, "new", "rest", TEXTS})  # a delta capture's keys, not shown
# A string this long (in characters) that an earlier entry of the run holds is stored by where it is.
# Only an entry whose body is this long can hold one: a run of small values never looks.
LONG = 1024


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
    held: dict[int, Entry] = {}  # the entries a capture's ``texts`` may refer to
    for e in entries:
        if e.kind != "capture":
            if len(e.body) >= LONG:
                held[e.seq] = e
            continue
        d = e.data
        if "rest" not in d:
            shown[e.seq] = d  # stored whole (or withheld, before captures by delta)
            continue
        texts = d.get(TEXTS, {})
        for h, m in d.get("new", {}).items():
            if h not in texts:
                bodies[h] = m
            elif filled(m, texts[h], held) and digest(canonical(m)) == h:
                bodies[h] = m  # else missing: its entry changed, or is not in this journal
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


def long_strings(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[list[Any], str]]:
    """Each string of ``value`` (JSON) that is ``LONG`` or longer, with its path (keys, indexes)."""
    if isinstance(value, str):
        if len(value) >= LONG:
            yield list(path), value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from long_strings(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from long_strings(v, (*path, i))


def filled(message: Any, texts: list[Any], held: dict[int, Entry]) -> bool:
    """Put back into ``message`` (in place) each string its ``texts`` says where to find in
    ``held`` (entries by seq); False if one is not there."""
    for at, seq, path in texts:
        e = held.get(seq)
        value: Any = e.fields if e is not None else None
        try:
            for k in path:
                value = value[k]
            parent = message
            for k in at[:-1]:
                parent = parent[k]
            if not isinstance(value, str) or parent[at[-1]] is not None:
                return False
            parent[at[-1]] = value
        except (KeyError, IndexError, TypeError):
            return False
    return True


def shown_data(e: Entry, whole: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """An entry's data as a person reads it: a capture's request whole (``whole``: ``requests``)."""
    return whole[e.seq] if e.seq in whole else e.data
