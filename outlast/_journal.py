"""This module computes canonical JSON, hashes, and the journal's SHA-256 chain.

The chain is keyless: it detects corruption and naive rewriting, not a forger who can
recompute every hash.
"""

from __future__ import annotations

import hashlib
import json
import re
from array import array
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from itertools import accumulate
from json import encoder as _encoder
from json.encoder import encode_basestring
from typing import Any

from pydantic_core import to_jsonable_python

from outlast.errors import InvalidInput

MAX_DEPTH = 200
_INT64 = 2**63
_TOO_DEEP = f"the value is nested deeper than {MAX_DEPTH} levels: flatten it"

# A JSON text escapes NUL as \u0000; preceded by an odd run of backslashes it is a real escape,
# not a string that spells it out.
_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")
_SURROGATE = re.compile(r"[\ud800-\udfff]")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
# Built once: ``json.dumps`` with these options builds an encoder on every call (same text).
_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
# And the C encoder that ``encode`` itself builds on every call, built once and called directly:
# the same function with the same options, so the same text, without the Python layers above it.
# No circular check in it: ``to_jsonable_python`` refuses a cycle before it is reached.
_c_make_encoder = _encoder.c_make_encoder  # type: ignore[attr-defined]
_CHUNKS = (
    None
    if _c_make_encoder is None
    else _c_make_encoder(None, _ENCODER.default, encode_basestring, None, ":", ",", True, False, False)
)


def _encode(value: Any) -> str:
    return "".join(_CHUNKS(value, 0)) if _CHUNKS is not None else _ENCODER.encode(value)


class Unstorable(InvalidInput, ValueError):
    """``Unstorable`` is raised for a value Postgres cannot store or outlast refuses to: the message
    says why and the fix; the caller adds whose value it is. Also a ``ValueError``, as JSON encoding
    errors always were."""


class Oversized(Exception):
    """An entry's body past the inline limit (``make_entry`` with ``inline_max``): its largest
    values go to the payload store (``outlast._payloads.offload``), and it is made again."""


class Limit(int):
    """A size limit that knows the setting it comes from, which its refusal names."""

    setting: str

    def __new__(cls, value: int, setting: str) -> Limit:
        made = super().__new__(cls, value)
        made.setting = setting
        return made


def canonical(value: Any, limit: int | None = None) -> str:
    """One text for one value: sorted keys, no spaces, UTF-8 kept.

    Refuses (``Unstorable``) what cannot be stored: NaN or infinity, a string or key holding NUL
    or a lone surrogate, nesting deeper than ``MAX_DEPTH``, a type JSON has no form for, and,
    with ``limit``, a text longer than ``limit`` bytes.
    """
    try:
        text = _encode(to_jsonable_python(value))
    except RecursionError:
        raise Unstorable(_TOO_DEEP) from None
    except ValueError as exc:
        if "depth" in str(exc):  # pydantic_core's own guard, short of the recursion limit
            raise Unstorable(_TOO_DEEP) from None
        if "float values" in str(exc):
            raise Unstorable(
                "the value holds NaN or infinity, which JSON cannot carry: send null or a string"
            ) from None
        raise Unstorable(f"the value is not JSON: {not_json(value) or str(exc).splitlines()[0]}") from None
    if "\\u0000" in text and _NUL.search(text):
        raise Unstorable(
            "the value holds a NUL character (\\u0000) in a string or key, "
            "which Postgres cannot store: remove it"
        )
    if not text.isascii() and _SURROGATE.search(text):  # ASCII has none: no scan
        raise Unstorable(
            "the value holds a lone surrogate (\\ud800-\\udfff) in a string, which is not valid Unicode"
        )
    if text.count("[") + text.count("{") > MAX_DEPTH and _depth(text) > MAX_DEPTH:
        raise Unstorable(_TOO_DEEP)
    if limit is not None:
        check_size(text, limit)
    return text


def not_json(value: Any, path: str = "") -> str | None:
    """Where in ``value`` (dict keys, list indexes) the first value JSON has no form for is, and
    its type (``at .order.items[2]: a object``), or None. Walked only after a refusal."""
    if isinstance(value, Mapping):
        for k, v in value.items():
            found = not_json(v, f"{path}.{k}")
            if found:
                return found
        return None
    if isinstance(value, list | tuple):
        for i, v in enumerate(value):
            found = not_json(v, f"{path}[{i}]")
            if found:
                return found
        return None
    try:
        to_jsonable_python(value)
    except ValueError:
        return f"at {path or '(the value)'}: a {type(value).__name__}, which JSON has no form for"
    return None


def unordered(value: Any, path: str = "") -> str | None:
    """Where in ``value`` a set or frozenset is (``at .tags: a set``), or None: its order changes
    from one process to the next, so a call's arguments holding one hash differently on a resume.
    Only containers are walked (a call's plain values cost one ``isinstance`` each)."""
    if isinstance(value, set | frozenset):
        return f"at {path or '(the value)'}: a {type(value).__name__}"
    if isinstance(value, dict):
        items: Iterable[tuple[Any, Any]] = value.items()
    elif isinstance(value, list | tuple):
        items = enumerate(value)
    else:
        return None
    for k, v in items:
        if isinstance(v, _CONTAINERS):
            found = unordered(v, f"{path}.{k}" if isinstance(value, dict) else f"{path}[{k}]")
            if found:
                return found
    return None


_CONTAINERS = (set, frozenset, dict, list, tuple)


def jsonable(value: Any, limit: int | None = None) -> Any:
    """``value`` as it is stored and read back: ``json.loads(canonical(value, limit))``, refusals
    included. A boolean, None or a 64-bit whole number is its own; a text or a float is checked only."""
    kind = type(value)
    if kind is bool or value is None or (kind is int and -_INT64 <= value < _INT64 and (limit or 20) >= 20):
        return value  # at most 20 characters of JSON, always storable
    text = canonical(value, limit)
    return value if kind is str or kind is float else json.loads(text)


def _depth(text: str) -> int:
    """How deep a canonical JSON text nests, counting brackets outside strings, in C loops (no
    recursion, no Python loop per bracket)."""
    outside = _STRING.sub("", text).encode()  # ASCII once the strings are gone
    steps = array("b", outside.translate(_STEP, _NOT_BRACKET))  # +1 opens, -1 closes
    return max(accumulate(steps), default=0)


_STEP = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")
_NOT_BRACKET = bytes(b for b in range(256) if b not in b"[{]}")


def fits(text: str, limit: int) -> bool:
    """Whether ``text`` is at most ``limit`` bytes of UTF-8."""
    # at most 4 bytes a character: surely within, without encoding
    return len(text) * 4 <= limit or len(text.encode()) <= limit


def check_size(text: str, limit: int, what: str | None = None) -> None:
    """Refuse (``Unstorable``) a text longer than ``limit`` bytes of UTF-8."""
    if not fits(text, limit):
        size = len(text.encode())
        what = what or getattr(limit, "setting", "OUTLAST_MAX_PAYLOAD")
        raise Unstorable(
            f"the value is {size} bytes of JSON, over the limit of {int(limit)} ({what}): "
            "store large data elsewhere and pass a reference"
        )


def body_bytes(entries: Iterable[Entry]) -> int:
    """The bytes the entries' bodies take as UTF-8: what their append adds to the run's count
    (``journal_bytes``). An ASCII text is its length (known at once); any other is encoded.
    A plain loop: it runs at every append (a generator in ``sum`` cost a frame more each time)."""
    n = 0
    for e in entries:
        n += len(e.body) if e.body.isascii() else len(e.body.encode())
    return n


def storable(text: str) -> str:
    """Text Postgres can store, from any text (an exception's message, a traceback): a NUL or a
    lone surrogate is written out as an escape instead of failing the write."""
    return text.replace("\x00", "\\x00").encode("utf-8", "backslashreplace").decode("utf-8")


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def args_hash(args: Mapping[str, Any]) -> str:
    """The hash an approver sees and a journal entry records for a call's arguments."""
    return digest(canonical(args))


def chain(prev_hash: str, body: str) -> str:
    return digest(prev_hash + body)


@dataclass(frozen=True)
class Entry:
    """An ``Entry`` is one crossing as journaled: its position, its canonical body and its chain hash."""

    seq: int
    kind: str
    op_id: str | None
    body: str
    hash: str

    @property
    def intact(self) -> bool:
        """Whether every value the entry holds by reference was read back unchanged (an entry
        with none always is: ``outlast._payloads.Resolved`` checks the others)."""
        return True

    @property
    def data(self) -> dict[str, Any]:
        """The body parsed afresh: a copy the caller may keep, change or hand to workflow code."""
        value: dict[str, Any] = json.loads(self.body)
        return value

    @cached_property
    def fields(self) -> Mapping[str, Any]:
        """The body parsed once and kept: for the engine's own reads (the chain's check, a
        crossing's tool and arguments hash). Never handed out: ``data`` is the copy to give."""
        value: dict[str, Any] = json.loads(self.body)
        return value


class Unread(Entry):
    """An entry whose body a resume did not read (a capture: replay needs none). Its stored hash
    stands for it: the chain is checked from it at the next entry, and in full where the body is
    read (``outlast verify``, ``status``, the bundle)."""

    @property
    def data(self) -> dict[str, Any]:
        return {"seq": self.seq, "kind": self.kind, "op": self.op_id}

    @cached_property
    def fields(self) -> Mapping[str, Any]:
        return self.data


def make_entry(
    prev_hash: str,
    seq: int,
    kind: str,
    op_id: str | None,
    data: Mapping[str, Any],
    inline_max: int | None = None,
) -> Entry:
    """Build the next entry of a chain whose head is ``prev_hash``; ``Oversized`` if its body
    passes ``inline_max`` bytes (its values then go to the payload store)."""
    body = canonical({"seq": seq, "kind": kind, "op": op_id, **data})
    if inline_max is not None and len(body) * 4 > inline_max and len(body.encode()) > inline_max:
        raise Oversized()
    return Entry(seq, kind, op_id, body, chain(prev_hash, body))


def first_bad_crossing(entries: Iterable[Entry], head: str | None = None) -> int | None:
    """The number of the first entry whose chain does not verify, or None if all do.

    ``head`` is the run row's recorded head: a journal cut short (or one with an entry
    appended by someone else) fails there, at the crossing after the last good one.
    """
    prev = ""
    n = 0
    for n, e in enumerate(entries, start=1):
        ok = e.seq == n and (isinstance(e, Unread) or (e.hash == chain(prev, e.body) and e.intact))
        if ok and not isinstance(e, Unread):
            data = e.fields
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
    not executed: it may run once), ``abandoned`` (a read or idempotent call given up on when its
    run's cancellation outlived its grace: no result, never dispatched again), ``pending`` (an
    intention or a re-dispatch with no outcome: a gap), or ``none``.
    """
    state, last = "none", None
    for e in entries:
        if e.kind in ("intention", "redispatch"):
            state = "pending"
        elif e.kind == "result":
            state = "done"
        elif e.kind in ("in_doubt", "abandoned"):
            state = e.kind
        elif e.kind == "resolution":
            state = "done" if e.fields.get("executed") else "cleared"
        else:
            continue
        last = e
    return state, last
