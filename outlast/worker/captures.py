"""``current_action().capture(request)`` journals what a tool sent, as it left the process.

A ``capture`` entry of the operation (chained like every entry) is appended after the dispatch
and before its result (or its in-doubt declaration), so that the request and the answer are read
together and the request is there even when the answer is not. A tool that never captures costs
one empty-list test. The request is stored with the call's secret values masked (``[secret]``,
after the app's redaction hook), each message of it apart.

A request with a ``messages`` list is stored by delta (``outlast._captured``): against the
previous capture of the same tool in the run, only the messages no capture of the run stored
before. ``Captures`` keeps what the run stored (each message's hash, each tool's last capture),
learnt again from the journal's captures at the run's first capture after a resume (the resume
itself reads none of them). A new message's long string that an earlier entry of the run holds
(the tool's result the model now receives) is stored as where that entry holds it (``texts``),
found in the journal the worker keeps (``Journaled.long``, indexed when a capture first needs it).
A message the agent dumped once (``Message``) is masked and hashed
once per run, and a history that extends the last one is hashed from where that one ended: a
capture costs what is new, not the conversation's length.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from dataclasses import dataclass
from typing import Any, Protocol

from outlast._captured import LONG, MESSAGES, TEXTS, Message, framing, long_strings, requests
from outlast._journal import Entry, Unstorable, canonical, digest
from outlast._secrets import Secrets
from outlast.action import Action
from outlast.app import Tool
from outlast.worker.journaled import Journaled
from outlast.worker.replayer import Replayer


class CaptureReader(Protocol):
    async def captures(self, run_id: str, upto: int) -> list[Entry]: ...


@dataclass
class _Masked:
    """A message as stored: its hash, its JSON text and that text's size in bytes."""

    hash: str
    text: str
    size: int


@dataclass
class _Last:
    """A tool's last capture in the run: the base the next one is stored against."""

    request_hash: str
    head: str  # the whole request's text up to its messages' items
    hashes: list[str]
    sealed: list[Any] | None  # its messages as captured, when every one was a ``Message``
    hasher: Any  # SHA-256 of head and the messages' texts, comma-separated: extended, not redone
    size: int  # bytes of that text


class Captures:
    """What a run's captures stored: each message's hash, each tool's last capture."""

    def __init__(self, journal: CaptureReader, run_id: str, secrets: Secrets, journaled: int) -> None:
        self._journal, self._run_id, self._secrets = journal, run_id, secrets
        self._journaled = journaled  # the resume's entries, whose captures are learnt when needed
        self._learnt = asyncio.Lock()
        self._stored: set[str] = set()  # the hashes of the messages stored in the run
        self._last: dict[str, _Last] = {}
        self._by_id: dict[int, tuple[Message, _Masked]] = {}
        self._by_text: dict[str, _Masked] = {}
        self._secret_args: dict[str, dict[str, Any]] = {}
        self._held: dict[str, tuple[int, list[Any]]] = {}  # a long string -> its entry's seq, path
        self._indexed = 0  # how many of the journal's ``long`` entries ``_held`` holds

    async def journal(self, replayer: Replayer, tool: Tool, args: dict[str, Any], action: Action) -> None:
        """Journal the last request the dispatch captured (the caller checked there is one)."""
        if self._journaled:
            async with self._learnt:
                if self._journaled:
                    self._learn(await self._journal.captures(self._run_id, self._journaled), replayer.journal)
                    self._journaled = 0
        data = self.stored(tool.name, args, action.captured[-1], replayer.journal)
        await replayer.append("capture", action.operation_id, data)  # chained now, in this order

    def stored(
        self, tool: str, args: dict[str, Any], request: Any, journal: Journaled | None = None
    ) -> dict[str, Any]:
        """The capture entry's data for ``request``: by delta (``outlast._captured``) when it has
        a ``messages`` list, else ``request`` whole (masked); with ``request_hash`` (SHA-256 of
        the whole request's stored JSON text) and ``bytes``; or why it cannot be kept.
        ``journal``: the run's, whose entries a new message's long strings are found in."""
        try:
            self._forget_if_secrets_changed(tool, args)
            if isinstance(request, dict) and isinstance(request.get(MESSAGES), list):
                return self._delta(tool, args, request, journal)
            kept = self._mask(tool, args, request)
            text = canonical(kept)
            # TODO(payloads): a request larger than OUTLAST_MAX_PAYLOAD goes to the payload store.
            return {"tool": tool, "request_hash": digest(text), "bytes": len(text.encode()), "request": kept}
        except Unstorable as exc:
            return {"tool": tool, "withheld": f"the request is not storable: {exc}"}
        except ValueError:  # the redaction hook left text that is no longer JSON
            return {"tool": tool, "withheld": "the redaction hook made the request unreadable as JSON"}

    def _delta(
        self, tool: str, args: dict[str, Any], request: dict[str, Any], journal: Journaled | None
    ) -> dict[str, Any]:
        rest = self._mask(tool, args, {k: v for k, v in request.items() if k != MESSAGES})
        head, tail = framing(rest)
        messages: list[Any] = request[MESSAGES]
        last = self._last.get(tool)
        n = len(last.hashes) if last is not None else 0
        if last is not None and last.head == head and last.sealed is not None and messages[:n] == last.sealed:
            added = [self._message(tool, args, m) for m in messages[n:]]  # an extension: only the new
            hasher, size = last.hasher.copy(), last.size
            hashes = [*last.hashes, *(m.hash for m in added)]
            segments: list[Any] = [[0, n]] if n else []
            segments += [m.hash for m in added]
            sealed = [*last.sealed, *messages[n:]] if _sealed(messages[n:]) else None
        else:  # not an extension of the last: each message found by its hash, the runs as slices
            added = [self._message(tool, args, m) for m in messages]
            hasher, size, n = hashlib.sha256(head.encode()), len(head.encode()), 0
            hashes = [m.hash for m in added]
            segments = _segments(hashes, last.hashes if last is not None else [])
            sealed = list(messages) if _sealed(messages) else None
        new: dict[str, Any] = {}
        texts: dict[str, list[Any]] = {}
        for i, m in enumerate(added):
            hasher.update(("," + m.text if n + i else m.text).encode())
            size += m.size + (1 if n + i else 0)
            if m.hash not in self._stored and m.hash not in new:
                # TODO(payloads): a message larger than OUTLAST_MAX_PAYLOAD goes to the payload
                # store, ``new`` holding its reference; kept inline until then (never withheld).
                new[m.hash] = json.loads(m.text)
                if m.size >= LONG and journal is not None:  # a small message holds no long string
                    found = self._found(new[m.hash], journal)
                    if found:
                        texts[m.hash] = found
        whole = hasher.copy()
        whole.update(tail.encode())
        data: dict[str, Any] = {
            "tool": tool,
            "request_hash": whole.hexdigest(),
            "bytes": size + len(tail.encode()),
            MESSAGES: segments,
            "new": new,
            "rest": rest,
        }
        if last is not None:
            data["base"] = last.request_hash
        if texts:
            data[TEXTS] = texts
        self._stored.update(new)
        self._last[tool] = _Last(data["request_hash"], head, hashes, sealed, hasher, size)
        return data

    def _found(self, message: Any, journal: Journaled) -> list[Any]:
        """Each long string of ``message`` that an earlier entry of ``journal`` holds, as
        ``[path in the message, seq, path in the entry]``, left ``None`` in ``message``."""
        for e in journal.long[self._indexed :]:  # the entries journaled since the last look
            for path, s in long_strings(e.fields):
                self._held.setdefault(s, (e.seq, path))
        self._indexed = len(journal.long)
        found: list[Any] = []
        for at, s in list(long_strings(message)):
            where = self._held.get(s)
            if where is not None:
                found.append([at, *where])
                parent = message
                for k in at[:-1]:
                    parent = parent[k]
                parent[at[-1]] = None
        return found

    def _message(self, tool: str, args: dict[str, Any], m: Any) -> _Masked:
        """One message as stored (masked), found again by identity (a ``Message``) or by text."""
        if type(m) is Message:
            hit = self._by_id.get(id(m))
            if hit is not None and hit[0] is m:
                return hit[1]
        raw = canonical(m)
        masked = self._by_text.get(raw)
        if masked is None:
            text = canonical(self._mask(tool, args, json.loads(raw)))
            masked = self._by_text[raw] = _Masked(digest(text), text, len(text.encode()))
        if type(m) is Message:
            self._by_id[id(m)] = (m, masked)  # the message kept: its id is not reused
        return masked

    def _mask(self, tool: str, args: dict[str, Any], value: Any) -> Any:
        # the app's redaction hook and the call's secret values on the text, then every secret
        # value the run knows in each string (one written with escapes in JSON text too)
        return self._secrets.scrub(json.loads(self._secrets.redact(tool, args, canonical(value))))

    def _forget_if_secrets_changed(self, tool: str, args: dict[str, Any]) -> None:
        """Masked messages are kept for the call's secret values: others, and they are masked again."""
        values = {k: args[k] for k in self._secrets.names(tool) if k in args}
        if self._secret_args.setdefault(tool, values) != values:
            self._secret_args[tool] = values
            self._by_id.clear()
            self._by_text.clear()
            self._last.pop(tool, None)

    def _learn(self, entries: list[Entry], journal: Journaled) -> None:
        """What the captures journaled before the resume stored (read once, at the first capture);
        ``journal``'s entries hold the strings they refer to."""
        whole = requests(sorted([*journal.long, *entries], key=lambda e: e.seq))
        for e in entries:
            d = e.fields
            if "rest" not in d:
                continue
            self._stored.update(d.get("new", {}))
            request = whole[e.seq].get("request")
            if request is None:
                continue
            texts = [canonical(m) for m in request[MESSAGES]]
            head, _ = framing(d["rest"])
            hasher = hashlib.sha256((head + ",".join(texts)).encode())
            size = len(head.encode()) + sum(len(t.encode()) for t in texts) + max(len(texts) - 1, 0)
            hashes = [digest(t) for t in texts]
            self._last[d["tool"]] = _Last(d["request_hash"], head, hashes, None, hasher, size)


def _sealed(messages: list[Any]) -> bool:
    return all(type(m) is Message for m in messages)


def _segments(hashes: list[str], base: list[str]) -> list[Any]:
    """``hashes`` as a delta's ``messages``: runs found in ``base`` as slices, the rest as hashes."""
    where = {h: i for i, h in reversed(list(enumerate(base)))}
    out: list[Any] = []
    for h in hashes:
        last = out[-1] if out else None
        if isinstance(last, list) and last[1] < len(base) and base[last[1]] == h:
            last[1] += 1
        elif h in where:
            out.append([where[h], where[h] + 1])
        else:
            out.append(h)
    return out
