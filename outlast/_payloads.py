"""This module holds values by reference for the journal.

A journal entry whose body would pass ``OUTLAST_MAX_PAYLOAD`` keeps its largest values in the
run's *payload store*, each under its SHA-256, and holds their references instead.

A **reference** is ``{"sha256": ..., "size": ..., "media_type": "application/json"}``, kept under
the body's ``"$refs"`` key (by the value's key: ``{"$refs": {"result": {...}}, "kind": ...}``).
Canonical JSON sorts keys, and ``$`` sorts before every key the engine writes, so a body holding
references opens with ``{"$refs":`` (``referenced`` reads 9 characters, not the body). The chain
hashes the body, references included; a value read back is checked against its SHA-256 before it
is used (``Resolved.intact``), so a changed payload fails the chain's check as a changed entry
does. An entry that holds no reference is byte for byte what it was before the payload store.

The payload store is a table of Postgres (``payloads``, migration 0033) holding each value's
bytes, or, with ``OUTLAST_PAYLOAD_STORE`` set, only its row, the bytes in an S3-compatible object
store (``outlast._objects``). The row is the index either way: what a run stored, its size, and
whether a journal entry refers to it yet (the sweeper's: an orphan is swept after a grace).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Protocol

from pydantic_core import to_jsonable_python

from outlast._journal import MAX_DEPTH, Entry, Unstorable, _depth, canonical, check_size, fits, jsonable
from outlast.errors import PayloadChanged

REFS = "$refs"
PAYLOAD = "payload"  # the key a message's payload held by reference is under
INPUT = "input"  # a run's input
RESULT = "result"  # a run's result
ANSWER = "answer"  # a request's answer (its row in ``requests``)
JSON = "application/json"
_SLICE = 1 << 20  # characters of a text encoded at a time (to hash it, or to store it)
_OPENS = '{"' + REFS + '":'
# The entries a trigger projects from their body (state, events), by the key of the value shown:
# only that value is held by reference, and the row shown holds ``{"$refs": {key: reference}}``
# (migration 0036), read back whole as a column's value is (``column_ref``).
SHOWN = {"state": "value", "event": "data"}
INLINE_ONLY = frozenset(SHOWN)


class ObjectStore(Protocol):
    """Where the bytes of an object store's payloads live (``outlast._objects.S3Objects``)."""

    async def put(self, key: str, data: bytes) -> None: ...

    async def get(self, key: str) -> bytes | None: ...

    async def delete(self, keys: list[str]) -> None: ...


def key_of(run_id: str, sha256: str) -> str:
    """The object's key (under the store's prefix): one per run and value."""
    return f"{run_id}/{sha256}"


def referenced(body: str) -> bool:
    """Whether a stored body holds references (it opens with them: keys are sorted)."""
    return body.startswith(_OPENS)


def refs(body: str) -> dict[str, dict[str, Any]]:
    """The references a body holds, by the entry's key."""
    found: dict[str, dict[str, Any]] = json.loads(body)[REFS] if referenced(body) else {}
    return found


def offload(data: Mapping[str, Any], inline_max: int) -> tuple[dict[str, Any], dict[str, bytes]]:
    """``data`` with its largest values replaced by references until the rest fits ``inline_max``
    bytes, and the bytes to store by SHA-256. Only reached by an entry too large to be inline."""
    texts = {k: canonical(v).encode() for k, v in data.items()}
    budget = inline_max - 200  # the entry's own keys and the references
    kept = dict(data)
    refs_: dict[str, dict[str, Any]] = {}
    out: dict[str, bytes] = {}
    for k in sorted(texts, key=lambda k: -len(texts[k])):
        if sum(len(t) for key, t in texts.items() if key not in refs_) <= budget:
            break
        body = texts[k]
        sha = hashlib.sha256(body).hexdigest()
        refs_[k] = {"sha256": sha, "size": len(body), "media_type": JSON}
        out[sha] = body
        del kept[k]
    kept[REFS] = refs_
    return kept, out


def offload_shown(
    kind: str, data: Mapping[str, Any], inline_max: int
) -> tuple[dict[str, Any], dict[str, bytes]]:
    """A state or event entry's ``data`` with its shown value by reference (``SHOWN``), and its
    bytes by SHA-256; ``Unstorable`` if the rest still passes ``inline_max``."""
    key = SHOWN[kind]
    kept = {k: v for k, v in data.items() if k != key}
    check_size(canonical(kept), inline_max - 200)
    held, sha, body = held_by_reference(key, canonical(data.get(key)))
    return {**kept, **held}, {sha: body}


def reads_as_reference(kind: str, data: Mapping[str, Any]) -> bool:
    """Whether a state or event entry's shown value holds ``$refs`` itself: its row would read
    as a reference, so it is held by reference (as a message's payload is)."""
    value = data.get(SHOWN[kind])
    return isinstance(value, dict) and REFS in value


def by_reference(value: Any, text: str, inline_max: int) -> bool:
    """Whether a column's value (of canonical JSON ``text``) is held by reference: past
    ``inline_max`` bytes, or holding ``$refs`` itself (so that an inline one never reads as one)."""
    return not fits(text, inline_max) or (isinstance(value, dict) and REFS in value)


def held_by_reference(key: str, text: str) -> tuple[dict[str, Any], str, bytes]:
    """A column's value (a message's payload, a run's input) held by reference: what the column holds,
    ``{"$refs": {key: reference}}``, and the SHA-256 and bytes the payload store keeps."""
    body = text.encode()
    sha = hashlib.sha256(body).hexdigest()
    return {REFS: {key: {"sha256": sha, "size": len(body), "media_type": JSON}}}, sha, body


class Serialised:
    """A JSON object's canonical text in parts (its keys, and each value's text apart), made
    once: ``text`` joins them for a value kept inline; ``body`` encodes them for the payload
    store a slice at a time, dropping each part as it goes, so that the text and its bytes
    are never both whole in memory."""

    __slots__ = ("parts", "size")

    def __init__(self, parts: list[str]) -> None:
        self.parts = parts
        self.size = sum(len(p) if p.isascii() else len(p.encode()) for p in parts)

    def text(self) -> str:
        return "".join(self.parts)

    def body(self) -> bytearray:
        out = bytearray()
        parts, self.parts = self.parts, []
        for i, p in enumerate(parts):
            parts[i] = ""
            for at in range(0, len(p), _SLICE):
                out += p[at : at + _SLICE].encode()
            del p
        return out


def serialised(value: dict[str, Any], limit: int | None = None) -> Serialised:
    """A dict's canonical text (``canonical(value, limit)``, the same refusals) in parts: its
    values each made apart, never joined with the rest (a large one is one copy of its text,
    not two). A dict whose keys are not all strings is one part."""
    try:
        jv = to_jsonable_python(value)
    except (ValueError, RecursionError):
        return Serialised([canonical(value, limit)])  # which refuses it in its own words
    if not isinstance(jv, dict) or not all(type(k) is str for k in jv):
        return Serialised([canonical(value, limit)])
    parts = ["{"]
    try:
        for k in sorted(jv):
            if len(parts) > 1:
                parts.append(",")
            text = canonical(jv[k])
            if (
                text.count("[") + text.count("{") >= MAX_DEPTH and _depth(text) >= MAX_DEPTH
            ):  # one deeper here
                canonical(value)  # refuses it as the whole value would be refused
            parts += [canonical(k), ":", text]
    except Unstorable:
        canonical(value, limit)  # the whole value's own words for it
        raise
    parts.append("}")
    made = Serialised(parts)
    if limit is not None and made.size > limit:
        check_size(made.text(), limit)
    return made


def result_of(value: dict[str, Any], limit: int, inline_max: int, scrub: Callable[[Any], Any] | None) -> Any:
    """A dict (a run's result) as ``jsonable`` makes it; one holding a text past ``inline_max``
    (surely held by reference), with no secret for ``scrub`` to mask in it, its canonical text
    alone (``Serialised``), made once and never whole beside the value's own text."""
    if not any(type(v) is str and len(v) > inline_max for v in value.values()):
        return jsonable(value, limit)  # as before: one text made whole, then read back
    made = serialised(value, limit)
    if scrub is None or scrub(value) is value:
        return made
    return json.loads(made.text())


def result_held(result: Any, inline_max: int) -> tuple[dict[str, Any], str, bytes | bytearray] | None:
    """A run's result past ``inline_max`` held by reference: what its row holds, and the SHA-256
    and bytes the payload store keeps (None: the result is inline). A ``Serialised`` one (made by
    ``result_of``) is not serialised again."""
    if not isinstance(result, Serialised):
        text = canonical(result)
        return held_by_reference(RESULT, text) if by_reference(result, text, inline_max) else None
    body = result.body()
    sha = hashlib.sha256(body).hexdigest()
    return {REFS: {RESULT: {"sha256": sha, "size": len(body), "media_type": JSON}}}, sha, body


def column_ref(value: Any, key: str) -> dict[str, Any] | None:
    """The reference a column's value holds under ``key`` (None: the value is inline). A sender
    stores every value holding ``$refs`` by reference, so an inline value never looks like one."""
    if isinstance(value, dict) and REFS in value and len(value) == 1 and isinstance(value[REFS], dict):
        found = value[REFS].get(key)
        return found if isinstance(found, dict) and "sha256" in found else None
    return None


def sha256_of(got: bytes | str) -> str:
    """The SHA-256 of a value's bytes, or of its text as UTF-8: a text is encoded a slice at a
    time (the same bytes in the same order), never whole, which would be one more copy of it."""
    if isinstance(got, bytes):
        return hashlib.sha256(got).hexdigest()
    h = hashlib.sha256()
    for i in range(0, len(got), _SLICE):
        h.update(got[i : i + _SLICE].encode())
    return h.hexdigest()


def whole_value(run_id: str, key: str, ref: Mapping[str, Any], got: bytes | str | None) -> Any:
    """The value a column holds by ``ref``, from its bytes (or their text); ``PayloadChanged`` if
    they are missing or their SHA-256 is not the reference's."""
    sha = ref["sha256"]
    if got is None or sha256_of(got) != sha:
        why = "missing from" if got is None else "changed in"
        raise PayloadChanged(
            f"run '{run_id}': the {key} held by reference ({sha}) is {why} the payload store"
        )
    return json.loads(got)


class PayloadsUnavailable(Exception):
    """The object store did not answer: an outage, as Postgres's (the run is left, not failed)."""


@dataclass(frozen=True)
class Resolved(Entry):
    """An entry holding references, with the bytes read for them (by SHA-256; absent when the
    store had none), or their text (a message's take: the text its receive read, kept rather
    than encoded again). ``data`` and ``fields`` give the values whole; a payload missing or
    changed makes the entry not ``intact``, which the chain's check refuses, and stays a reference."""

    payloads: Mapping[str, bytes | str] = field(default_factory=dict, compare=False)

    @property
    def intact(self) -> bool:
        return self._checked

    @cached_property
    def _checked(self) -> bool:
        got = self.payloads
        return all(
            s in got and sha256_of(got[s]) == s for s in (r["sha256"] for r in refs(self.body).values())
        )

    def _whole(self) -> dict[str, Any]:
        value: dict[str, Any] = json.loads(self.body)
        if not self.intact:
            return value
        for k, r in value.pop(REFS).items():
            value[k] = json.loads(self.payloads[r["sha256"]])
        return value

    @property
    def data(self) -> dict[str, Any]:
        return self._whole()

    @cached_property
    def fields(self) -> Mapping[str, Any]:
        return self._whole()


def resolved(entries: list[Entry], fetched: Mapping[str, bytes]) -> list[Entry]:
    """``entries`` with each one holding references given its bytes from ``fetched``."""
    return [
        Resolved(e.seq, e.kind, e.op_id, e.body, e.hash, {s: fetched[s] for s in _shas(e) if s in fetched})
        if e.body and referenced(e.body)
        else e
        for e in entries
    ]


def wanted(entries: list[Entry]) -> list[str]:
    """The SHA-256 of every value the entries hold by reference, once each."""
    return list(dict.fromkeys(s for e in entries if e.body and referenced(e.body) for s in _shas(e)))


def _shas(e: Entry) -> list[str]:
    return [r["sha256"] for r in refs(e.body).values()]


def too_large(run_id: str, crossing: str, exc: Unstorable) -> Unstorable:
    """The one-line refusal of a value past its limit, naming the run and the crossing."""
    return Unstorable(f"run '{run_id}': {crossing}: {exc}")


def held(e: Entry) -> dict[str, Any]:
    """What a bundle's line adds to an entry's values whole: the references it holds, if any."""
    return {REFS: refs(e.body)} if e.body and referenced(e.body) else {}


def entry_of_line(data: dict[str, Any], hash_: str) -> Entry:
    """An entry rebuilt from a bundle's line (its values whole, ``held`` beside them): the body
    as journaled, references included, and the values' bytes as the payload store held them."""
    kept = data.pop(REFS, None)
    if not kept:
        return Entry(data["seq"], data["kind"], data["op"], canonical(data), hash_)
    values = {r["sha256"]: canonical(data.pop(k)).encode() for k, r in kept.items() if k in data}
    body = canonical({**data, REFS: kept})
    return Resolved(data["seq"], data["kind"], data["op"], body, hash_, values)
